internal import COpenSSL
import HTTPWire

extension DigestAlgorithm {
    /// OpenSSL's `EVP_MD` for the algorithm (static objects; never freed). The algorithm itself is a value of
    /// HTTPWire (the decisions module's checksums name it too); only the hashing is here.
    fileprivate var messageDigest: OpaquePointer? {
        switch self {
        case .sha256: return EVP_sha256()
        case .sha384: return EVP_sha384()
        case .sha512: return EVP_sha512()
        case .sha1: return EVP_sha1()
        case .md5: return EVP_md5()
        }
    }
}

/// An incremental message digest over OpenSSL's EVP interface.
///
/// Feed bytes with ``update(_:)-(UnsafeRawBufferPointer)`` as they arrive, then call
/// ``finalize()``. After `finalize()` the digest starts over, so one instance can hash several
/// messages in turn. Not `Sendable`: use one instance from one thread at a time.
public final class DKDigest {
    /// The algorithm.
    public let algorithm: DigestAlgorithm
    private let context: OpaquePointer

    /// Creates a digest. Wraps `EVP_MD_CTX_new` and `EVP_DigestInit_ex`.
    ///
    /// The three algorithms are built into OpenSSL's default provider, so initialisation can only
    /// fail when memory is exhausted or OpenSSL is misconfigured (a FIPS-only configuration refusing
    /// MD5); that stops the program with a message rather than producing a wrong digest.
    public init(_ algorithm: DigestAlgorithm) {
        self.algorithm = algorithm
        guard let context = EVP_MD_CTX_new() else {
            preconditionFailure("EVP_MD_CTX_new failed: out of memory")
        }
        self.context = context
        Self.start(context, algorithm)
    }

    deinit {
        EVP_MD_CTX_free(context)
    }

    private static func start(_ context: OpaquePointer, _ algorithm: DigestAlgorithm) {
        ERR_clear_error()
        guard EVP_DigestInit_ex(context, algorithm.messageDigest, nil) == 1 else {
            preconditionFailure("EVP_DigestInit_ex(\(algorithm.rawValue)) failed: \(OpenSSLErrors.drain())")
        }
    }

    /// Adds bytes to the message. Wraps `EVP_DigestUpdate`.
    public func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return }
        // EVP_DigestUpdate only fails on a context that was never initialised.
        _ = EVP_DigestUpdate(context, base, bytes.count)
    }

    /// Adds bytes to the message.
    public func update(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { update($0) }
    }

    /// Returns the digest of everything added since creation (or the previous `finalize()`), and
    /// starts over. Wraps `EVP_DigestFinal_ex`.
    /// - Returns: ``DigestAlgorithm/byteCount`` bytes.
    public func finalize() -> [UInt8] {
        var output = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        let status = output.withUnsafeMutableBufferPointer { EVP_DigestFinal_ex(context, $0.baseAddress, &length) }
        precondition(status == 1, "EVP_DigestFinal_ex(\(algorithm.rawValue)) failed")
        Self.start(context, algorithm)
        return Array(output.prefix(Int(length)))
    }

    /// Lower-case hexadecimal text for `bytes` ("e3b0c442…").
    public static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: text, as: UTF8.self)
    }

    /// The digest of `bytes` in one call.
    public static func hash(_ algorithm: DigestAlgorithm, _ bytes: [UInt8]) -> [UInt8] {
        let digest = DKDigest(algorithm)
        digest.update(bytes)
        return digest.finalize()
    }
}
