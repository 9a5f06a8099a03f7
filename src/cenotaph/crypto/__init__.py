"""Key hierarchy, KEK epochs, key providers, AEAD and HMAC tokens."""
