"""Embedding lookup table."""
from typing import Optional

import numpy as np

from ..core._tensor import Parameter, Tensor
from ..functional.nn import embedding as embedding_func
from . import init
from .module import Module

__all__ = ["Embedding"]


class Embedding(Module):
    r"""A lookup table: integer indices select rows of ``weight`` ``(num_embeddings, embedding_dim)``.

    Args:
        num_embeddings: the table size.
        embedding_dim: the size of each embedding vector.
        padding_idx: not supported (must be None), as in MegEngine.
        max_norm: not supported (must be None), as in MegEngine.
        norm_type: not supported (must be None), as in MegEngine.
        initial_weight: a ``(num_embeddings, embedding_dim)`` Tensor to copy into ``weight``; default draws
            from N(0, 1).
        freeze: do not propagate gradients into ``weight``.

    Example:
        >>> emb = M.Embedding(10, 3)
        >>> emb(mge.Tensor([[1, 2], [3, 4]], dtype="int32")).shape
        (2, 2, 3)
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: Optional[int] = None,
                 max_norm: Optional[float] = None, norm_type: Optional[float] = None,
                 initial_weight: Parameter = None, freeze: bool = False, **kwargs):
        super().__init__(**kwargs)
        if padding_idx is not None:
            raise ValueError("Embedding: padding_idx is not supported (as in MegEngine 1.13)")
        if max_norm is not None or norm_type is not None:
            raise ValueError("Embedding: max_norm / norm_type weight normalisation is not supported "
                             "(as in MegEngine 1.13)")
        self.padding_idx = padding_idx
        self.max_norm = max_norm
        self.norm_type = norm_type
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.freeze = freeze
        if initial_weight is None:
            self.weight = Parameter(np.zeros((num_embeddings, embedding_dim), dtype=np.float32))
            self.reset_parameters()
        else:
            value = initial_weight.numpy() if isinstance(initial_weight, Tensor) else np.asarray(initial_weight)
            if value.shape != (num_embeddings, embedding_dim):
                raise ValueError(f"Embedding: initial_weight shape {value.shape} does not match "
                                 f"(num_embeddings, embedding_dim) = {(num_embeddings, embedding_dim)}")
            self.weight = Parameter(value)

    def reset_parameters(self) -> None:
        """Re-initialise ``weight`` from N(0, 1).

        Example:
            >>> emb = M.Embedding(10, 3); emb.reset_parameters(); emb.weight.shape
            (10, 3)
        """
        init.normal_(self.weight)

    def forward(self, inputs):
        """The rows of ``weight`` at the integer indices ``inputs``; shape ``inputs.shape + (embedding_dim,)``."""
        weight = self.weight.detach() if self.freeze else self.weight
        return embedding_func(inputs, weight)

    @classmethod
    def from_pretrained(cls, embeddings: Parameter, freeze: Optional[bool] = True, padding_idx: Optional[int] = None,
                        max_norm: Optional[float] = None, norm_type: Optional[float] = None):
        r"""Create an Embedding whose table is a copy of ``embeddings``.

        Args:
            embeddings: a 2-D Tensor ``(num_embeddings, embedding_dim)``.
            freeze: keep the table fixed during training (default True).
            padding_idx, max_norm, norm_type: must be None (unsupported, as in MegEngine).

        Returns:
            the new Embedding.

        Example:
            >>> emb = M.Embedding.from_pretrained(mge.Tensor(np.eye(3, dtype="float32")))
            >>> emb(mge.Tensor([2], dtype="int32")).numpy()
            array([[0., 0., 1.]], dtype=float32)
        """
        shape = tuple(embeddings.shape)
        if len(shape) != 2:
            raise ValueError(f"Embeddings parameter is expected to be 2-dimensional, got shape {shape}")
        return cls(num_embeddings=shape[0], embedding_dim=shape[1], initial_weight=embeddings,
                   padding_idx=padding_idx, max_norm=max_norm, norm_type=norm_type, freeze=freeze)
