"""Model providers behind one port."""
