"""``signum``: signSGD with momentum (Bernstein et al., ICML'18), majority vote in the switch.

As `signsgd`, but the worker votes with the sign of its local momentum ``m = beta m + (1 -
beta) g`` (the ``momentum`` memory, ``momentum=0.9``), not of the raw gradient. The vote is
the sign of the switch's count of ``+1`` votes, ``log2(N + 1)`` bits per value.
"""

from __future__ import annotations

from ina.compressors.base import register
from ina.compressors.signsgd import SignSGD


@register("signum")
class Signum(SignSGD):
    """Majority vote of the signs of each worker's momentum."""

    memory = "momentum"
    summary = "1-bit signs of the local momentum, majority vote in the switch"
