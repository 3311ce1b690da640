"""The demo's real base model and its trained experts."""
