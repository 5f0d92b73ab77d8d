"""Other tools' files of a circuit (``circuit -f eap-ig``; what each is called:
:data:`attnviz.choices.FOREIGN_OUTPUTS`): each one's writer, the circuit in, the file's
text out."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from attnviz.choices import Output
from attnviz.circuits.eap_ig import eap_ig_document
from attnviz.data_formats import dump_json

if TYPE_CHECKING:
    from attnviz.circuits.circuit import Circuit


def _eap_ig(circuit: Circuit) -> str:
    return dump_json(eap_ig_document(circuit))


WRITERS: dict[Output, Callable[[Circuit], str]] = {
    Output.EAP_IG: _eap_ig,
}
