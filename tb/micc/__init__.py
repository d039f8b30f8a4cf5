"""cocotb bench of the MicC (:mod:`hw.ctrl.micc`)."""
