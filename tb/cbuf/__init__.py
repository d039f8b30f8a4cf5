"""cocotb bench of the Cbufs (:mod:`hw.ctrl.cbuf`)."""
