"""cocotb benches of the FDPU top (``hw.top.FDPU``)."""
