"""The receiver's HTTP layer: routes, authentication, body limits and problem responses."""
