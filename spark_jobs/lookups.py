"""Py4J's lookups of a JVM class and of its static methods, each made once per process.

PySpark calls a Spark SQL function (``F.col``, ``F.when``, a literal, ``PythonUtils.toSeq``)
through Py4J in three round trips to the JVM: one resolves ``org.apache.spark.sql.functions``
to a class, one resolves the function's name to a static method of it, and one calls it. The
first two answer the same for the life of the JVM, and a job builds its plans from tens of
thousands of such calls (measured: one apply_changes of 2,605 DSQL records made 32,500
round trips, each about 0.25 ms on 2 cores). :func:`remember_lookups` keeps
each answer that names a class or a method on the object that asked for it, so that only
the call itself crosses to the JVM.

What is kept is a name the JVM resolves again at each call: a class, a static method (the
JVM picks the overload from the call's arguments), an inner class. What may change is not
kept: a static field's value, and a name that resolved to a package (a class of that name
may be loaded later). A short name (``functions``, ``PythonUtils``) resolves through the
view's imports as they stand at its first lookup: a star import added later whose package
has a class of the same name, and sorts first, would not change it (PySpark's own short
names come from the imports it adds as the gateway starts).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# Set on py4j's module once its lookups remember their answers.
_INSTALLED = "_airflow_cdc_remembers_lookups"


def remember_lookups() -> None:
    """Make ``JVMView`` (``sc._jvm.<Class>``) and ``JavaClass`` (``<Class>.<method>``)
    lookups keep the class or method they find. Idempotent, process-wide."""
    from py4j import java_gateway as gateway

    if getattr(gateway, _INSTALLED, False):
        return
    gateway.JVMView.__getattr__ = _keeping(gateway.JVMView.__getattr__, gateway.JavaClass)
    gateway.JavaClass.__getattr__ = _keeping(
        gateway.JavaClass.__getattr__, (gateway.JavaClass, gateway.JavaMember)
    )
    setattr(gateway, _INSTALLED, True)


def _keeping(lookup: Callable[[Any, str], Any], kept: type | tuple[type, ...]) -> Any:
    """``lookup`` (a ``__getattr__``), storing an answer of the ``kept`` types in the asking
    object's ``__dict__``: Python looks there first, so the name's next lookup is a plain
    attribute read that never reaches ``__getattr__``. A private name is never stored."""

    def remembering(owner: Any, name: str) -> Any:
        found = lookup(owner, name)
        if isinstance(found, kept) and not name.startswith("_"):
            owner.__dict__[name] = found
        return found

    return remembering
