"""cocotb bench of the Dbuf scratch-pad."""
