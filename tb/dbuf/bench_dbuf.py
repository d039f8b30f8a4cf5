"""cocotb bench of ``hw.noc.dbuf.Dbuf``: random LOAD/STORE flits and their edge-multicast
kinds (good, misaligned, foreign, out-of-range, bad size, bad broadcast) against
``sw.models.noc.DbufModel``, with idle cycles on the requests and backpressure on the
replies; replies must come back in request order, none for a posted MSTORE."""

import json
import os
import random

import cocotb
from cocotb.triggers import ClockCycles

from sw.models.noc import DbufModel
from sw.spec.arch import ArrayParams
from sw.spec.packet import Kind, pack_flit
from tb.common.clock import reset, start_clock
from tb.common.stream import Scoreboard, StreamSink, StreamSource

_MODELS = {}


def make_request(rng, p, index, hot):
    kind = rng.choice([Kind.LOAD, Kind.STORE, Kind.LOAD, Kind.STORE, Kind.MLOAD, Kind.MSTORE])
    size = rng.choice([1, 2, 3, 3, 3])
    base = p.dbuf_bytes * index
    roll = rng.random()
    if roll < 0.06:
        addr = base + rng.randrange(p.dbuf_bytes) | 1          # misaligned (or size 1 odd)
    elif roll < 0.10:
        addr = rng.randrange(p.memory_bytes)                    # maybe another Dbuf
    elif roll < 0.12:
        addr = p.memory_bytes + rng.randrange(1 << 20)          # past every Dbuf
    elif roll < 0.14:
        size = 0
        addr = base
    else:
        addr = base + rng.choice(hot) + (rng.randrange(8 >> size) << size)
    bcast = int(kind in (Kind.LOAD, Kind.MLOAD) and rng.random() < (0.2 if size == 1 else 0.03))
    fields = dict(addr=addr & 0xFFFFFFFF, size=size, bcast=bcast,
                  src_x=rng.randrange(p.cols + 2), src_y=rng.randrange(p.rows + 2),
                  slot=rng.randrange(p.slots), tag=rng.randrange(16))
    if kind in (Kind.STORE, Kind.MSTORE):
        fields["data"] = rng.getrandbits(64)
    return pack_flit(p, kind, p.dbuf_coord(index), **fields)


class TB:
    """Clock, reset, request source, reply sink, the Dbuf model and an in-order scoreboard.

    ``idle``: probability that the request source pauses in a cycle; ``stall``: that the reply
    sink is not ready.
    """

    def __init__(self, dut, *, idle=None, stall=None):
        params = json.loads(os.environ["FDPU_PARAMS"])
        self.dut = dut
        self.p = ArrayParams(rows=params["rows"], cols=params["cols"],
                             dbuf_bytes=params["dbuf_bytes"])
        self.index = params["index"]
        self.rng = random.Random(random.getrandbits(64))
        start_clock(dut.clk)
        self.scoreboard = Scoreboard("o_reply")
        self.source = StreamSource(dut, "i_req", dut.clk, pause=idle, rng=self.rng, rst=dut.rst)
        self.sink = StreamSink(dut, "o_reply", dut.clk, pause=stall, rng=self.rng,
                               callback=lambda word: self.scoreboard.receive(int(word)))
        # The bank keeps its contents from one cocotb test to the next (same simulation).
        self.model = _MODELS.setdefault(self.index, DbufModel(self.p, self.index))
        # A few hot 8-byte words so that loads read back what stores wrote.
        self.hot = [8 * self.rng.randrange(self.p.dbuf_bytes // 8) for _ in range(6)] + \
            [0, self.p.dbuf_bytes - 8]

    async def start(self):
        await reset(self.dut.clk, self.dut.rst)
        self.model.reset()

    def send_random(self, count):
        """Send ``count`` random requests, their model replies expected in order; return the
        replies expected (a posted MSTORE has none)."""
        replies = 0
        for _ in range(count):
            request = make_request(self.rng, self.p, self.index, self.hot)
            reply = self.model.reply(request)
            if reply is not None:
                self.scoreboard.expect(reply)
                replies += 1
            self.source.send(request)
        return replies

    async def finish(self, count, replies):
        """Await every request sent and every reply received (bounded), then check."""
        await self.source.wait_sent(max_cycles=20 * count + 100)
        await self.sink.wait_count(replies, max_cycles=20 * count + 100)
        await ClockCycles(self.dut.clk, 10)
        self.scoreboard.check_done()
        assert self.sink.count == replies, f"{self.sink.count} replies for {replies} expected"


async def run(dut, count, idle, stall):
    tb = TB(dut, idle=idle, stall=stall)
    await tb.start()
    await tb.finish(count, tb.send_random(count))


@cocotb.test()
async def random_traffic(dut):
    await run(dut, 400, 0.3, 0.3)


@cocotb.test()
async def full_rate(dut):
    await run(dut, 300, None, None)


@cocotb.test()
async def slow_replies(dut):
    await run(dut, 200, None, 0.8)
