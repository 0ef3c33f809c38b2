"""Generator families. Each module offers Config, ladder()/default_config(), check() and render()."""
