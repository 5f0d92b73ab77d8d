"""Options several commands share, given to each command as one argument: a dataclass
whose fields declare the options (:func:`bundle`), and which of them were given."""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Iterable
from dataclasses import fields
from typing import Any

from typer.models import OptionInfo

from attnviz.request import Request


def bundle_options(
    argument: str, options: dict[str, tuple[Any, Any]], make: Callable[..., Any]
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """A decorator giving a command the ``options`` (name: (annotation, default)) as one
    argument, ``make(**values)``, so that options several commands share are declared
    once and each command's signature lists only its own. The options take the place
    of that argument in the signature, and so in ``--help``."""

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        own = inspect.signature(command, eval_str=True)
        parameters = []
        for parameter in own.parameters.values():
            if parameter.name != argument:
                parameters.append(parameter)
                continue
            parameters += [
                inspect.Parameter(name, parameter.kind, default=default, annotation=hint)
                for name, (hint, default) in options.items()
            ]

        @functools.wraps(command)
        def with_bundle(**arguments: object) -> None:
            given = {name: arguments.pop(name) for name in options}
            command(**arguments, **{argument: make(**given)})

        with_bundle.__signature__ = own.replace(parameters=parameters)  # type: ignore[attr-defined]
        with_bundle.__annotations__ = {p.name: p.annotation for p in parameters}
        return with_bundle

    return decorate


def bundle(
    argument: str, settings: type, leave_out: Iterable[str] = ()
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """:func:`bundle_options` of a dataclass whose fields declare the options: each
    field's annotation is its option (``Annotated[..., typer.Option(...)]``) and its
    default the option's, so that an option is declared once, on its field. The fields
    ``leave_out`` names are no options of the commands this bundle decorates (they keep
    their defaults)."""
    hints = typing.get_type_hints(settings, include_extras=True)
    left_out = set(leave_out)
    options = {
        field.name: (hints[field.name], field.default)
        for field in fields(settings)
        if field.name not in left_out
    }
    return bundle_options(argument, options, settings)


def request_fields(settings: Any) -> dict[str, Any]:
    """The fields of a bundle that are fields of :class:`~attnviz.request.Request` (the
    same name is the same option), with their values: what the bundle asks of the
    extractors. A bundle field that a request should read is named as the request's."""
    wanted = {field.name for field in fields(Request)}
    return {
        field.name: getattr(settings, field.name)
        for field in fields(settings)
        if field.name in wanted
    }


def given_flags(settings: Any, among: Iterable[str] | None = None) -> list[str]:
    """The options of a :func:`bundle` dataclass given away from their defaults (those
    ``among`` some fields, if named), as the user wrote them: ``--cmap``, and
    ``--no-special`` for a switch turned off."""
    hints = typing.get_type_hints(type(settings), include_extras=True)
    named = None if among is None else set(among)
    flags = []
    for field in fields(settings):
        value = getattr(settings, field.name)
        if (named is not None and field.name not in named) or value == field.default:
            continue
        (option,) = (m for m in hints[field.name].__metadata__ if isinstance(m, OptionInfo))
        # In Annotated, typer keeps an option's first name where its default would be.
        name = str((option.param_decls or (option.default,))[0])
        on, _, off = name.partition("/")
        flags.append(off if off and value is False else on)
    return flags
