"""Slots cut into lanes, each attending only as wide as its own longest chat.

With one attention width for every slot, a decode step reads as many key columns per slot as
the longest chat in flight needs: in ShareGPT one 1,600-token prompt among a thousand of 150
tokens makes every slot read ten times the keys it uses, and attention was 59 % of the
device's time on the H200. So the slots are cut into a few contiguous lanes, a decode step
attends each lane at its own width, and a new chat goes to the lane it widens least (best
fit), which gathers the long chats in the same lanes. Contiguous lanes keep each lane's keys
a view of the cache, not a gather; few lanes keep the CUDA graphs (one per combination of
lane widths) few, and past `MAX_GRAPHS` a step replays the cheapest captured combination
that is at least as wide in every lane.
"""

from __future__ import annotations

from collections.abc import Iterable

MAX_LANES = 4
LANE_SLOTS = 128  # no lane is smaller: on fewer rows a lane's own kernels stop paying
MAX_GRAPHS = 24


def layout(slots: int, lane_slots: int = LANE_SLOTS, max_lanes: int = MAX_LANES) -> list[range]:
    """Contiguous slot ranges: at most `max_lanes`, each of at least `lane_slots` slots (the
    last may be shorter)."""
    size = max(lane_slots, -(-slots // max_lanes))
    return [range(s, min(s + size, slots)) for s in range(0, slots, size)]


class FreeSlots:
    """The free slots of each lane, and which one a new chat takes."""

    def __init__(self, lanes: list[range]) -> None:
        self.lanes = lanes
        self.size = lanes[0].stop - lanes[0].start
        self.free = [list(reversed(lane)) for lane in lanes]  # popped from the end: lowest slot first

    def __len__(self) -> int:
        return sum(map(len, self.free))

    def lane_of(self, slot: int) -> int:
        return slot // self.size

    def take(self, need: int, bounds: list[int]) -> int:
        """A slot for a chat that will reach `need` positions: in the narrowest lane already as
        wide (`bounds`: each lane's widest chat), else in the widest lane, which it widens least.
        `bounds` is updated for the chats taken after this one."""
        open_ = [i for i, f in enumerate(self.free) if f]
        if not open_:
            raise RuntimeError("no free slot: take only as many chats as len() says are free")
        fits = [i for i in open_ if bounds[i] >= need]
        lane = min(fits, key=lambda i: bounds[i]) if fits else max(open_, key=lambda i: bounds[i])
        bounds[lane] = max(bounds[lane], need)
        return self.free[lane].pop()

    def give(self, slot: int) -> None:
        self.free[self.lane_of(slot)].append(slot)


def covering(widths: tuple[int, ...], have: Iterable[tuple[int, ...]], sizes: list[int]) -> tuple[int, ...] | None:
    """Of the captured width combinations, the one reading fewest columns that is at least as
    wide as `widths` in every lane (None: none is)."""
    wide = [k for k in have if all(h >= w for h, w in zip(k, widths))]
    return min(wide, key=lambda k: sum(n * h for n, h in zip(sizes, k)), default=None)
