"""cocotb bench of the DMA (hw.ctrl.dma) with the external memory model and Dbufs/Cbufs."""
