"""The text format (placeholder while it is written)."""

from __future__ import annotations

from poot_ir.core import Program

__all__ = ["format_program", "parse_program"]


def format_program(program: Program) -> str:
    raise NotImplementedError


def parse_program(text: str) -> Program:
    raise NotImplementedError
