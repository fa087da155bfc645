"""Closed-form sums over a run of engine iterations whose cost is the larger of straight lines in the iteration
index (compute and memory grow with the KV cache), above a floor (an eager engine's host time): the engine
jumps over many identical-shape decode iterations at once (``costmodel.DecodeCost.span``)."""

from __future__ import annotations

import math

__all__ = ["sum_max_lines", "sum_max_lines_floor"]


def sum_max_lines(a1: float, s1: float, a2: float, s2: float, n: int) -> float:
    """sum_{i=0}^{n-1} max(a1 + s1*i, a2 + s2*i) in O(1)."""

    def lin(a: float, s: float, i0: int, i1: int) -> float:  # sum over i in [i0, i1)
        k = i1 - i0
        return a * k + s * (i0 + i1 - 1) * k / 2.0 if k > 0 else 0.0

    if s1 == s2:
        return lin(max(a1, a2), s1, 0, n)
    x = (a2 - a1) / (s1 - s2)  # line1 >= line2 for i >= x when s1 > s2
    cut = n if x >= n else (0 if not x > 0 else math.ceil(x))  # x may be +-inf when the slopes nearly agree
    if s1 > s2:
        return lin(a2, s2, 0, cut) + lin(a1, s1, cut, n)
    return lin(a1, s1, 0, cut) + lin(a2, s2, cut, n)


def sum_max_lines_floor(a1: float, s1: float, a2: float, s2: float, floor: float, n: int) -> float:
    """sum_{i=0}^{n-1} max(floor, a1 + s1*i, a2 + s2*i) for non-decreasing lines (s1, s2 >= 0): the lines'
    maximum is non-decreasing, so it is under the floor on a prefix of the iterations."""
    below = n  # iterations i < below have both lines under the floor
    for a, s in ((a1, s1), (a2, s2)):
        if a >= floor:
            below = 0
        elif s > 0 and (floor - a) / s < below:  # (a tiny slope leaves the line under the floor throughout)
            below = max(0, math.ceil((floor - a) / s))
    below = min(below, n)
    if below == 0:
        return sum_max_lines(a1, s1, a2, s2, n)
    return floor * below + sum_max_lines(a1, s1, a2, s2, n) - sum_max_lines(a1, s1, a2, s2, below)
