"""Order and structure of a flat ONNX node list: what each node reads, topological order, cycles.

Helpers of the module-function pass (``_functions.py``): grouping nodes into
function calls must keep every value produced before it is read, and must
find the groups that cannot be one node (a value leaving and coming back).
"""

from __future__ import annotations

import heapq
from typing import Iterable

import onnx

from onnxsight.exporter.translate._inline import graphs


def node_outputs(node: onnx.NodeProto) -> list[str]:
    return [o for o in node.output if o]


def node_reads(node: onnx.NodeProto) -> list[str]:
    """Names ``node`` reads: its inputs, and the outer-scope names its subgraphs read."""
    names = [n for n in node.input if n]
    for graph in graphs(node):
        local = {v.name for v in graph.input} | {t.name for t in graph.initializer}
        for inner in graph.node:
            names.extend(n for n in node_reads(inner) if n not in local)
            local.update(inner.output)
        names.extend(v.name for v in graph.output if v.name not in local)
    return names


def ordered(names: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(names))


def topological(nodes: list[onnx.NodeProto]) -> list[onnx.NodeProto]:
    """``nodes`` ordered so every value is produced before it is read, keeping the given order where it can."""
    producer = {name: i for i, node in enumerate(nodes) for name in node_outputs(node)}
    waiting = [0] * len(nodes)
    users: list[list[int]] = [[] for _ in nodes]
    for i, node in enumerate(nodes):
        for j in {producer[n] for n in node_reads(node) if n in producer and producer[n] != i}:
            waiting[i] += 1
            users[j].append(i)
    ready = [i for i, count in enumerate(waiting) if count == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for j in users[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                heapq.heappush(ready, j)
    if len(order) != len(nodes):
        raise AssertionError("module functions left a cycle in the graph")
    return [nodes[i] for i in order]


def units_on_cycles(edges: list[set[int]]) -> set[int]:
    """Vertices on a cycle (in a strongly connected component of more than one vertex), iteratively."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    stack: list[int] = []
    on_stack: set[int] = set()
    found: set[int] = set()
    counter = 0
    for root in range(len(edges)):
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges[child])))
                elif child in on_stack:
                    low[v] = min(low[v], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.update(component)
    return found
