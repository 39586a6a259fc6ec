"""Checkers for the end-of-chapter exercises.

One module per chapter (`ch01.py`, `ch02.py`, ...). Each defines `check_...(their_function)`
functions that a student calls on their own solution: a checker runs the function on a few
cases, prints what passed or what is wrong (with a hint), and returns True or False.

Every `check_*` function of every chapter module is re-exported here, so a notebook can write
`from mini_bert.exercises import check_causal_mask`.
"""
from __future__ import annotations

import importlib
import pkgutil

__all__: list[str] = []
for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    if _info.name.startswith("ch"):
        _module = importlib.import_module(f"{__name__}.{_info.name}")
        for _name in dir(_module):
            if _name.startswith("check_"):
                globals()[_name] = getattr(_module, _name)
                __all__.append(_name)
