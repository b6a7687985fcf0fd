"""The optional parts of twice and the extra that installs each (pyproject.toml's
`[project.optional-dependencies]`): one table, read by the command line and the web app.

    pip install 'twice[lab]'     the lab: twice lab, twice drill, the web app's drills
    pip install 'twice[auth]'    OIDC sign-in for a team (st.login)
    pip install 'twice[protobuf]'  OTLP protobuf span files (Langfuse's export)

A command that needs a missing extra says so in one line naming the extra, never with a
traceback (`MissingExtra`). This module imports nothing beyond the standard library: it is
consulted before anything heavy is loaded.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass


@dataclass(frozen=True)
class Extra:
    name: str
    brings: str  # what it is for, in words
    modules: tuple[str, ...]  # the top-level modules it alone installs (checked in this order)


EXTRAS = {
    "lab": Extra("lab", "the lab that generates every drill: twice lab, twice drill and the "
                 "web app's drills",
                 ("opentelemetry.sdk", "opentelemetry.exporter.otlp.json.file",
                  "opentelemetry.instrumentation.requests",
                  "openinference.instrumentation.langchain", "time_machine", "moto", "boto3")),
    "auth": Extra("auth", "OIDC sign-in for a team (st.login)", ("authlib",)),
    "protobuf": Extra("protobuf", "OTLP protobuf span files (what Langfuse's SDK sends)",
                      ("google.protobuf", "opentelemetry.proto")),
}


class MissingExtra(RuntimeError):
    """A part of twice whose extra is not installed."""

    def __init__(self, extra: str, module: str, what: str = "") -> None:
        self.extra, self.module = extra, module
        needs = f"{what} needs" if what else "this needs"
        super().__init__(f"{needs} the '{extra}' extra (module {module} is not installed): "
                         f"pip install 'twice[{extra}]'")


def missing_module(extra: str) -> str | None:
    """The first module of `extra` that cannot be imported, or None when all can."""
    for module in EXTRAS[extra].modules:
        try:
            if importlib.util.find_spec(module) is None:
                return module
        except ImportError as exc:  # a parent package, or a module it imports, is missing
            return exc.name or module
        except ValueError:
            return module
    return None


def require(extra: str, what: str = "") -> None:
    """Raise `MissingExtra` unless every module of `extra` can be imported."""
    module = missing_module(extra)
    if module is not None:
        raise MissingExtra(extra, module, what)


def extra_for(exc: ImportError) -> MissingExtra | None:
    """The extra an ImportError asks for, when the missing module's package is one only an
    extra brings (none of them is imported by twice's core)."""
    name = getattr(exc, "name", None) or ""
    for extra in EXTRAS.values():
        if name.split(".")[0] in {m.split(".")[0] for m in extra.modules}:
            return MissingExtra(extra.name, name)
    return None
