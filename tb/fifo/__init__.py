"""cocotb benches of :class:`hw.fifo.StreamFIFO` (and the harness self-test)."""
