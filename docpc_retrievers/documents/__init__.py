"""From PDF files to what an encoder sees: discovery, PDF rendering, page selection, grid composition."""
