"""Rebuilding a scheduled PrimFunc's statements bottom-up: the one walk the codegen passes share
(TVM 0.27's Python has no statement mutator)."""

from __future__ import annotations

from collections.abc import Callable

from tvm import s_tir, tirx


def transformed(stmt, post: Callable[[tirx.Stmt], tirx.Stmt | None]):
    """``stmt`` with each statement under it, itself included, replaced by ``post(s)`` where that
    is not None; children first, so ``post`` sees them rebuilt. The walk goes through loops,
    sequences, attributes, conditions and blocks' bodies; other statements are leaves. What
    ``post`` leaves alone is returned as the same object."""

    def walk(node):
        rebuilt = _with_children(node, walk)
        replaced = post(rebuilt)
        return rebuilt if replaced is None else replaced

    return walk(stmt)


def _with_children(stmt, walk):
    if isinstance(stmt, tirx.For):
        body = walk(stmt.body)
        return stmt if body.same_as(stmt.body) else with_body(stmt, body)
    if isinstance(stmt, tirx.SeqStmt):
        seq = [walk(s) for s in stmt.seq]
        if all(a.same_as(b) for a, b in zip(seq, stmt.seq)):
            return stmt
        return tirx.SeqStmt(seq)
    if isinstance(stmt, tirx.AttrStmt):
        body = walk(stmt.body)
        if body.same_as(stmt.body):
            return stmt
        return tirx.AttrStmt(stmt.node, stmt.attr_key, stmt.value, body)
    if isinstance(stmt, tirx.IfThenElse):
        then_case = walk(stmt.then_case)
        else_case = None if stmt.else_case is None else walk(stmt.else_case)
        if then_case.same_as(stmt.then_case) and (
            else_case is None or else_case.same_as(stmt.else_case)
        ):
            return stmt
        return tirx.IfThenElse(stmt.condition, then_case, else_case)
    if isinstance(stmt, s_tir.SBlockRealize):
        body = walk(stmt.block.body)
        return stmt if body.same_as(stmt.block.body) else with_body(stmt, body)
    return stmt


#: The constructor arguments of the nodes :func:`with_body` rebuilds, in order.
_FIELDS = {
    tirx.For: (
        "loop_var",
        "min",
        "extent",
        "kind",
        "body",
        "thread_binding",
        "annotations",
        "step",
    ),
    s_tir.SBlock: (
        "iter_vars",
        "reads",
        "writes",
        "name_hint",
        "body",
        "init",
        "alloc_buffers",
        "match_buffers",
        "annotations",
    ),
}


def with_body(node, body):
    """``node`` (a loop, a block, or a block's realize) with ``body`` in place of its own."""
    if isinstance(node, s_tir.SBlockRealize):
        return s_tir.SBlockRealize(node.iter_values, node.predicate, with_body(node.block, body))
    return type(node)(*(body if f == "body" else getattr(node, f) for f in _FIELDS[type(node)]))
