"""Built-in data collectors: one module each, each listing its classes in `COLLECTORS`."""
