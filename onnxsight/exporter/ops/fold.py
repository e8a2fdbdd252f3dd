"""col2im (``F.fold``) through ONNX Col2Im (opset 18+).

# NOTE: col2im and im2col are in torch.export's decomposition table, so they
# only reach this module when the captured graph is translated without
# decomposing (see ``_decompose.needs_decomposition``); otherwise they arrive
# as index_put/index, which export too. ONNX has no im2col op.
"""

from __future__ import annotations

from typing import Sequence

import torch

from onnxsight.exporter._builder import GraphBuilder, Value
from onnxsight.exporter._registry import translation
from onnxsight.exporter.ops._nn_common import add_batch, drop_batch, expand_ints

aten = torch.ops.aten


@translation(aten.col2im.default, since=18)
def aten_col2im(b: GraphBuilder, self: Value, output_size: Sequence[int | Value], kernel_size: Sequence[int],
                dilation: Sequence[int], padding: Sequence[int], stride: Sequence[int]) -> Value:
    """col2im(Tensor self, SymInt[2] output_size, int[2] kernel_size, int[2] dilation, int[2] padding,
    int[2] stride) -> Tensor

    Col2Im wants a batch axis; an unbatched (C*kh*kw, L) input gets one and loses it after.
    """
    pads = expand_ints(padding, 2)
    x = add_batch(b, self) if self.rank == 2 else self
    out = b.op("Col2Im", x, b.int_list(list(output_size)), b.const(expand_ints(kernel_size, 2), torch.int64),
               dilations=expand_ints(dilation, 2), pads=pads + pads, strides=expand_ints(stride, 2))
    out = drop_batch(b, out) if self.rank == 2 else out
    out.shape = b.node.out_shape
    return out
