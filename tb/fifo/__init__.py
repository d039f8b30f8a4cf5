"""cocotb benches of :class:`hw.lib.fifo.StreamFIFO` (and the harness self-test)."""
