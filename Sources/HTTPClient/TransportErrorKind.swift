extension TransportError.Code {
    /// Whether this code is a TLS failure (handshake, certificate verification, client identity, pinning)
    /// rather than a network one. One list, used by every caller that classifies (the CLI's exit status 5).
    public var isTLS: Bool { Self.tlsCodes.contains(self) }

    private static let tlsCodes: Set<TransportError.Code> = [
        .tlsHandshakeFailed, .certificateExpired, .certificateNotYetValid, .hostnameMismatch, .selfSignedCertificate,
        .unknownIssuer, .certificateVerificationFailed, .tlsFailed, .weakCertificateKey, .clientCertificateInvalid,
        .clientKeyInvalid, .clientKeyPassphraseRequired, .clientKeyPassphraseWrong, .clientKeyMismatch,
        .publicKeyPinMismatch,
    ]
}
