import HTTPWire

/// A client certificate for mutual TLS: a PEM certificate (chain) and its PEM private key, which may
/// be encrypted (PKCS#8 `ENCRYPTED PRIVATE KEY` or a traditional `Proc-Type: 4,ENCRYPTED` key).
public struct ClientCertificate: Sendable, Hashable, CustomStringConvertible {
    /// The PEM certificate file; further certificates in it are sent as the chain.
    public var certificatePath: String
    /// The PEM private key file; the certificate file itself when `nil` (both in one file).
    public var privateKeyPath: String?
    /// The passphrase of an encrypted key. Never shown in descriptions.
    public var passphrase: String?

    /// Creates a client certificate description.
    public init(certificatePath: String, privateKeyPath: String? = nil, passphrase: String? = nil) {
        self.certificatePath = certificatePath
        self.privateKeyPath = privateKeyPath
        self.passphrase = passphrase
    }

    public var description: String {
        "certificate \(certificatePath), key \(privateKeyPath ?? certificatePath)\(passphrase == nil ? "" : ", passphrase ***")"
    }
}

/// A SHA-256 digest of a server's SubjectPublicKeyInfo (DER), the form of curl's
/// `--pinnedpubkey sha256//BASE64`.
public struct PublicKeyPin: Sendable, Hashable, CustomStringConvertible {
    /// The 32 digest bytes.
    public var sha256: [UInt8]

    /// Creates a pin from digest bytes.
    public init(sha256: [UInt8]) {
        self.sha256 = sha256
    }

    /// `sha256//BASE64`.
    public var description: String { "sha256//" + Base64.encode(sha256) }

    /// Parses `sha256//BASE64[;sha256//BASE64…]`.
    /// - Throws: ``WireError/Code/malformedPin`` naming the entry when it does not start with
    ///   `sha256//` or is not Base64 of 32 bytes.
    public static func parseList(_ text: String) throws(WireError) -> [PublicKeyPin] {
        var pins: [PublicKeyPin] = []
        for entry in text.split(separator: ";", omittingEmptySubsequences: true) {
            let item = entry.trimmingCharacters(in: " ")
            guard item.hasPrefix("sha256//") else {
                throw WireError(.malformedPin, "\(item): only sha256//BASE64 pins are supported (not a file path)")
            }
            let bytes: [UInt8]
            do {
                bytes = try Base64.decode(String(item.dropFirst("sha256//".count)))
            } catch {
                throw WireError(.malformedPin, "\(item): not Base64 (\(error.detail))")
            }
            guard bytes.count == 32 else {
                throw WireError(.malformedPin, "\(item): a SHA-256 pin has 32 bytes, this has \(bytes.count)")
            }
            pins.append(PublicKeyPin(sha256: bytes))
        }
        guard !pins.isEmpty else { throw WireError(.malformedPin, "no pin given") }
        return pins
    }
}

extension Substring {
    fileprivate func trimmingCharacters(in set: Character) -> String {
        var slice = self
        while slice.first == set { slice.removeFirst() }
        while slice.last == set { slice.removeLast() }
        return String(slice)
    }
}

extension WireError.Code {
    /// A `--pinnedpubkey` value is not a list of `sha256//BASE64` entries of 32 bytes each.
    public static let malformedPin = WireError.Code("malformedPin")
}

extension TransportError.Code {
    /// The client certificate file could not be read or is not a PEM certificate.
    public static let clientCertificateInvalid = TransportError.Code("clientCertificateInvalid")
    /// The client key file could not be read or is not a PEM private key.
    public static let clientKeyInvalid = TransportError.Code("clientKeyInvalid")
    /// The client key is encrypted and no passphrase was given.
    public static let clientKeyPassphraseRequired = TransportError.Code("clientKeyPassphraseRequired")
    /// The client key could not be decrypted with the passphrase given.
    public static let clientKeyPassphraseWrong = TransportError.Code("clientKeyPassphraseWrong")
    /// The client key does not belong to the client certificate.
    public static let clientKeyMismatch = TransportError.Code("clientKeyMismatch")
    /// The server's public key matches none of the pins; the detail names the key seen (`sha256//…`).
    public static let publicKeyPinMismatch = TransportError.Code("publicKeyPinMismatch")
}
