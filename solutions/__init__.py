"""Reference solutions, one module per exercise; the source notebooks are generated from them."""
