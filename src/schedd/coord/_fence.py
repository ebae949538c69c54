"""The fencing value an owner adds to every write it guards."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from schedd.store._etcd import cmp_create


@dataclass(frozen=True)
class Fence:
    """Proof of ownership of one partition at one epoch.

    The epoch is the create revision of ``owners/{partition}``: it changes (and only grows)
    whenever the key is created anew, so a write that carries :meth:`compare` succeeds only
    while this exact ownership lasts. A zombie owner whose lease expired, or an owner that
    released the partition, fails the compare even if it does not know it lost the partition.

    Attributes:
        partition: the partition number.
        key: the etcd key ``owners/{partition}``.
        epoch: create revision of ``key`` when this node claimed it.
    """

    partition: int
    key: bytes
    epoch: int

    def compare(self) -> Any:
        """An etcd Compare that holds iff the owner key still has this create revision.

        Add it to the compare list of every transaction that must only apply while this
        node owns the partition; a failed transaction means :class:`schedd.FencedOut`.
        """
        return cmp_create(self.key, self.epoch)
