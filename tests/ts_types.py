"""Reads the declarations of a TypeScript types file (``labextension/src/types.ts``) and a
JSON Schema into one comparable form, and lists where they disagree.

A type becomes a set of atoms: ``"number"``, ``"string"``, ``"boolean"``, ``"object"``,
``"null"``, ``("literal", value)``, ``("array", <type>)`` or ``("ref", interface name)``.
String unions, TS aliases of them and enum ``$ref``s all expand to their literals, so
``status: RunStatus`` is compared value by value with ``RunStatus``'s enum.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NAMED = {"number": "number", "string": "string", "boolean": "boolean", "null": "null", "unknown": "object"}
JSON_TYPES = {
    "integer": "number",
    "number": "number",
    "string": "string",
    "boolean": "boolean",
    "object": "object",
    "null": "null",
}


@dataclass(frozen=True)
class Member:
    optional: bool
    type: frozenset


@dataclass
class TsTypes:
    aliases: dict[str, str]  # name -> type text
    interfaces: dict[str, dict[str, tuple[bool, str]]]  # name -> member -> (optional, type text)
    consts: dict[str, str]  # name -> initialiser text

    @classmethod
    def parse(cls, text: str) -> TsTypes:
        text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
        text = re.sub(r"//[^\n]*", "", text)
        aliases = dict(re.findall(r"export\s+type\s+(\w+)\s*=\s*([^;]+);", text))
        consts = dict(re.findall(r"export\s+const\s+(\w+)\s*(?::[^=]+)?=\s*([^;]+);", text))
        interfaces = {name: _members(body) for name, body in _interface_bodies(text)}
        return cls(aliases, interfaces, consts)

    def resolve(self, text: str) -> frozenset:
        atoms: set = set()
        for part in _split(text.strip(), "|"):
            atoms |= self._atom(part.strip())
        return frozenset(atoms)

    def _atom(self, part: str) -> set:
        if part.startswith("(") and part.endswith(")"):
            return set(self.resolve(part[1:-1]))
        if part[:1] in "'\"":
            return {("literal", part[1:-1])}
        if part.endswith("[]"):
            return {("array", self.resolve(part[:-2]))}
        generic = re.fullmatch(r"(\w+)<(.*)>", part, flags=re.S)
        if generic and generic[1] in ("Array", "ReadonlyArray"):
            return {("array", self.resolve(generic[2]))}
        if generic and generic[1] == "Record":
            return {"object"}
        if part in self.aliases:
            return set(self.resolve(self.aliases[part]))
        if part in self.interfaces:
            return {("ref", part)}
        return {NAMED.get(part, f"? {part}")}

    def members(self, interface: str) -> dict[str, Member]:
        return {
            name: Member(optional, self.resolve(text))
            for name, (optional, text) in self.interfaces.get(interface, {}).items()
        }

    def literals(self, alias: str) -> set | None:
        if alias not in self.aliases:
            return None
        return {atom[1] for atom in self.resolve(alias) if isinstance(atom, tuple) and atom[0] == "literal"}

    def array_literals(self, const: str) -> list[str] | None:
        if const not in self.consts:
            return None
        return re.findall(r"'([^']*)'", self.consts[const])


def _interface_bodies(text: str):
    for match in re.finditer(r"export\s+interface\s+(\w+)[^{]*\{", text):
        depth, end = 1, match.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(text[end], 0)
            end += 1
        yield match[1], text[match.end() : end - 1]


def _members(body: str) -> dict[str, tuple[bool, str]]:
    found = {}
    for member in _split(body, ";"):
        declared = re.fullmatch(r"\s*(?:readonly\s+)?(\w+)(\??)\s*:\s*(.+?)\s*", member, flags=re.S)
        if declared:
            found[declared[1]] = (declared[2] == "?", declared[3])
    return found


def _split(text: str, separator: str) -> list[str]:
    """``text`` split at ``separator`` outside brackets; empty parts dropped."""
    parts, depth, current = [], 0, ""
    for char in text:
        depth += {"<": 1, "(": 1, "{": 1, "[": 1, ">": -1, ")": -1, "}": -1, "]": -1}.get(char, 0)
        if char == separator and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return [p for p in (*parts, current) if p.strip()]


# -- the JSON Schema side -------------------------------------------------------------------


class SchemaTypes:
    """Object definitions of a schema's ``$defs`` as members, in the same form as TsTypes';
    an object definition ``X`` is the TS interface ``IX``."""

    def __init__(self, schema: dict):
        self.defs = schema["$defs"]

    def resolve(self, node: dict) -> frozenset:
        if "anyOf" in node:
            return frozenset().union(*(self.resolve(option) for option in node["anyOf"]))
        if "$ref" in node:
            target = node["$ref"].rsplit("/", 1)[-1]
            if "enum" in self.defs[target]:
                return frozenset(("literal", value) for value in self.defs[target]["enum"])
            return frozenset({("ref", "I" + target)})
        if node.get("type") == "array":
            return frozenset({("array", self.resolve(node["items"]))})
        return frozenset({JSON_TYPES[node["type"]]})

    def members(self, name: str) -> dict[str, Member]:
        definition = self.defs[name]
        required = set(definition.get("required", []))
        return {key: Member(key not in required, self.resolve(node)) for key, node in definition["properties"].items()}


def disagreements(schema: SchemaTypes, ts: TsTypes, name: str) -> list[str]:
    """Where interface ``I<name>`` differs from ``$defs/<name>``, one line each."""
    interface = "I" + name
    if interface not in ts.interfaces:
        return [f"types.ts declares no interface {interface}"]
    python, typescript = schema.members(name), ts.members(interface)
    lines = [f"{interface}.{key}: only in Python" for key in python if key not in typescript]
    lines += [f"{interface}.{key}: only in types.ts" for key in typescript if key not in python]
    for key in python.keys() & typescript.keys():
        want, have = python[key], typescript[key]
        if want.optional != have.optional:
            lines.append(f"{interface}.{key}: optional in {'Python' if want.optional else 'types.ts'} only")
        if want.type != have.type:
            lines.append(f"{interface}.{key}: Python {_show(want.type)}, types.ts {_show(have.type)}")
    return sorted(lines)


def _show(atoms: frozenset) -> str:
    return " | ".join(sorted(repr(a) if isinstance(a, tuple) else a for a in atoms))
