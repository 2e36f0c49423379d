"""Deformable position-sensitive RoI pooling as a module."""
from .module import Module

__all__ = ["DeformablePSROIPooling"]


class DeformablePSROIPooling(Module):
    r"""``forward(inp, rois, trans)`` = :func:`megxla.functional.deformable_psroi_pooling` with this module's
    configuration.

    Args:
        no_trans: pool without offsets.
        part_size: the offset grid size.
        pooled_h: output bins per RoI, vertically.
        pooled_w: output bins per RoI, horizontally.
        sample_per_part: samples per bin side.
        spatial_scale: scale from image to feature coordinates.
        trans_std: scale of the offsets.

    Example:
        >>> m = M.DeformablePSROIPooling(False, 2, 2, 2, 2, 1.0)
        >>> m(mge.Tensor(np.ones((1, 2, 4, 4), "float32")), mge.Tensor([[0, 0, 0, 3, 3]], dtype="float32"),
        ...   mge.Tensor(np.zeros((1, 2, 2, 2), "float32"))).shape
        (1, 2, 2, 2)
    """

    def __init__(self, no_trans, part_size, pooled_h, pooled_w, sample_per_part, spatial_scale, trans_std: float = 0.1,
                 **kwargs):
        super().__init__(**kwargs)
        self.no_trans = bool(no_trans)
        self.part_size = part_size
        self.pooled_h = pooled_h
        self.pooled_w = pooled_w
        self.sample_per_part = sample_per_part
        self.spatial_scale = spatial_scale
        self.trans_std = trans_std

    def forward(self, inp, rois, trans):
        """Pool each RoI of ``inp`` into ``pooled_h x pooled_w`` bins."""
        from .. import functional as F
        return F.deformable_psroi_pooling(inp, rois, trans, self.no_trans, self.part_size, self.pooled_h,
                                          self.pooled_w, self.sample_per_part, self.spatial_scale, self.trans_std)
