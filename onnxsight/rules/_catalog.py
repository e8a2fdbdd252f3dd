"""The rule catalog: every diagnostic onnxsight can emit.

Codes are ``<AREA><number>`` and never reused; a removed rule stays listed
with ``removed=True``. Call sites import the constants (``rules.UNSUPPORTED_OP``)
and pass the template's fields; they never write free-form messages.
The definitions live in one module per group of areas; this module gathers
them into ``CATALOG`` (code -> Rule, sorted by code).
"""

from __future__ import annotations

from types import MappingProxyType, ModuleType
from typing import Mapping

from onnxsight.rules import (_argument_rules, _compat_rules, _export_rules, _function_rules, _generation_rules,
                             _op_rules, _quant_rules, _runtime_rules, _value_rules, _verify_rules, _weight_rules)
from onnxsight.rules._argument_rules import *  # noqa: F401,F403
from onnxsight.rules._compat_rules import *  # noqa: F401,F403
from onnxsight.rules._export_rules import *  # noqa: F401,F403
from onnxsight.rules._function_rules import *  # noqa: F401,F403
from onnxsight.rules._generation_rules import *  # noqa: F401,F403
from onnxsight.rules._op_rules import *  # noqa: F401,F403
from onnxsight.rules._quant_rules import *  # noqa: F401,F403
from onnxsight.rules._rule import Rule
from onnxsight.rules._runtime_rules import *  # noqa: F401,F403
from onnxsight.rules._value_rules import *  # noqa: F401,F403
from onnxsight.rules._verify_rules import *  # noqa: F401,F403
from onnxsight.rules._weight_rules import *  # noqa: F401,F403

_MODULES: tuple[ModuleType, ...] = (_export_rules, _argument_rules, _compat_rules, _op_rules, _value_rules,
                                    _runtime_rules, _verify_rules, _function_rules, _weight_rules, _quant_rules,
                                    _generation_rules)


def _collect(modules: tuple[ModuleType, ...]) -> Mapping[str, Rule]:
    table: dict[str, Rule] = {}
    for module in modules:
        for value in vars(module).values():
            if isinstance(value, Rule):
                if value.code in table and table[value.code] is not value:
                    raise AssertionError(f"duplicate rule code {value.code}")
                table[value.code] = value
    return MappingProxyType(dict(sorted(table.items())))


CATALOG: Mapping[str, Rule] = _collect(_MODULES)

#: The rule constants by Python name (``UNSUPPORTED_OP`` -> Rule), for ``from rules import *``.
RULE_CONSTANTS: Mapping[str, Rule] = MappingProxyType(
    {name: value for module in _MODULES for name, value in vars(module).items()
     if isinstance(value, Rule) and name.isupper()})

__all__ = ["CATALOG", "RULE_CONSTANTS", *RULE_CONSTANTS]
