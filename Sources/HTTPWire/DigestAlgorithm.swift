/// A message digest algorithm DownloadKit computes: the checksums a download is checked with (`Checksum`,
/// `PieceChecksums`) name one, and HTTPClient's `DKDigest` computes it with OpenSSL.
///
/// A pure value, so it lives here rather than beside the hashing: HTTPClient (which hashes) depends on
/// HTTPWire and not on the decisions module, and the decisions module (whose checksums name an algorithm)
/// depends on HTTPWire alone — HTTPWire is the one module both see. The raw values are the names the
/// checksums' text forms and stored records use (`sha256=…`); ``HashAlgorithm/compactName`` maps the
/// wire's IANA names onto them.
public enum DigestAlgorithm: String, Sendable, Hashable, CaseIterable {
    /// SHA-256 (FIPS 180-4), 32 bytes. Use this to verify downloads.
    case sha256
    /// SHA-384 (FIPS 180-4), 48 bytes.
    case sha384
    /// SHA-512 (FIPS 180-4), 64 bytes.
    case sha512
    /// SHA-1, 20 bytes. Broken for collision resistance; only for checking published SHA-1 sums.
    case sha1
    /// MD5, 16 bytes. Broken; only for checking published MD5 sums and naming files by URL hash.
    case md5

    /// The digest length in bytes.
    public var byteCount: Int {
        switch self {
        case .sha256: return 32
        case .sha384: return 48
        case .sha512: return 64
        case .sha1: return 20
        case .md5: return 16
        }
    }
}
