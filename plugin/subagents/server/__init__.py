"""The HTTP server: the app, its security, Rasa's REST contract, A2A, OAuth callback, inspector."""
