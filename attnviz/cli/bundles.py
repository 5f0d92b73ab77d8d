"""Options several commands share, given to each command as one argument: a dataclass
whose fields declare the options (:func:`bundle`), and which of them were given;
:mod:`attnviz.cli.shared` gives a command all of its bundles as one argument."""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields
from typing import Any

from typer.models import OptionInfo

from attnviz.request import Request


@dataclass(frozen=True)
class Bundle:
    """Options several commands share, given to a command as one argument,
    ``make(**values)`` (``options``: name: (annotation, default)), so that they are
    declared once and each command's signature lists only its own. As a decorator it
    gives a command the bundle as its argument named ``argument``: the options take that
    argument's place in the signature, and so in ``--help``."""

    argument: str
    options: dict[str, tuple[Any, Any]]
    make: Callable[..., Any]

    def parameters(self, kind: Any) -> list[inspect.Parameter]:
        """The options as parameters of a command's signature."""
        return [
            inspect.Parameter(name, kind, default=default, annotation=hint)
            for name, (hint, default) in self.options.items()
        ]

    def made(self, arguments: dict[str, object]) -> Any:
        """The bundle of the options' values, taken out of a command's ``arguments``."""
        return self.make(**{name: arguments.pop(name) for name in self.options})

    def __call__(self, command: Callable[..., None]) -> Callable[..., None]:
        return in_place_of(self.argument, [self], lambda made: made[self.argument])(command)


def in_place_of(
    argument: str, bundles: Sequence[Bundle], make: Callable[[dict[str, Any]], Any]
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """A decorator putting the options of ``bundles``, in order, in the place of a
    command's ``argument``, which it is given as ``make`` of the bundles made (by their
    arguments' names)."""

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        own = inspect.signature(command, eval_str=True)
        parameters = []
        for parameter in own.parameters.values():
            if parameter.name != argument:
                parameters.append(parameter)
                continue
            for each in bundles:
                parameters += each.parameters(parameter.kind)

        @functools.wraps(command)
        def with_bundles(**arguments: object) -> None:
            made = {each.argument: each.made(arguments) for each in bundles}
            command(**arguments, **{argument: make(made)})

        with_bundles.__signature__ = own.replace(parameters=parameters)  # type: ignore[attr-defined]
        with_bundles.__annotations__ = {p.name: p.annotation for p in parameters}
        return with_bundles

    return decorate


def bundle(argument: str, settings: type, leave_out: Iterable[str] = ()) -> Bundle:
    """The :class:`Bundle` of a dataclass whose fields declare the options: each field's
    annotation is its option (``Annotated[..., typer.Option(...)]``) and its default the
    option's, so that an option is declared once, on its field. The fields ``leave_out``
    names are no options of the commands this bundle serves (they keep their defaults)."""
    hints = typing.get_type_hints(settings, include_extras=True)
    left_out = set(leave_out)
    options = {
        field.name: (hints[field.name], field.default)
        for field in fields(settings)
        if field.name not in left_out
    }
    return Bundle(argument, options, settings)


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
