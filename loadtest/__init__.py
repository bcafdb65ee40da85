"""V2 clients against a running server: smoke checks and Locust load tests with reports."""
