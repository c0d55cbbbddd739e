@_spi(DownloadKitInternal) import DownloadKit
import DownloadKitMetalink
import Foundation
import HTTPClient
import HTTPWire

extension Checksum {
    /// Whether the engine computes `algorithm` (it has every ``HTTPWire/HashAlgorithm`` but SHA-224).
    public static func engineComputes(_ algorithm: HashAlgorithm) -> Bool {
        DigestAlgorithm(rawValue: algorithm.compactName) != nil
    }

    /// The checksum that checks a file against `digest` (a Metalink `<hash>`); nil for an algorithm the
    /// engine does not compute (``engineComputes(_:)``).
    public init?(metalink digest: HashDigest) {
        guard let algorithm = DigestAlgorithm(rawValue: digest.algorithm.compactName) else { return nil }
        self.init(algorithm: algorithm, expectedHex: digest.hex)
    }
}

extension PieceChecksums {
    /// The piece table that checks a file against `pieces` (a Metalink `<pieces>`); nil for an algorithm the
    /// engine does not compute.
    public init?(metalink pieces: MetalinkPieces) {
        guard let algorithm = DigestAlgorithm(rawValue: pieces.algorithm.compactName) else { return nil }
        self.init(algorithm: algorithm, pieceLength: pieces.length, digests: pieces.hashes.map(\.bytes))
    }
}

/// What `aria2.addMetalink` reads: the base64 text of a Metalink 4 or 3 document, decoded, parsed and
/// planned file by file (``DownloadKitMetalink/MetalinkFilePlan``, the rule `get --metalink` uses).
/// Pure; every refusal is an ``RPCError`` (code 1, as aria2) naming its cause.
public enum Aria2Metalink {
    /// The document `text` holds in base64 (white space between the characters allowed, as a client that
    /// wraps lines sends it). Its size is bounded twice: by the RPC's ``RPCLimits/maxBytes`` on the whole
    /// request, and by `limits` on the decoded document.
    /// - Throws: ``RPCError`` for text that is not base64, and for a document the parser refuses, naming the
    ///   line and column (``DownloadKitMetalink/MetalinkError``).
    public static func document(base64 text: String, limits: MetalinkLimits = .default) throws(RPCError) -> Metalink {
        let compact = text.filter { !$0.isWhitespace }
        guard let data = Data(base64Encoded: compact) else {
            throw .aria2("Metalink: the metalink parameter is not base64 text.")
        }
        do {
            return try Metalink(parsing: [UInt8](data), limits: limits)
        } catch {
            throw .aria2("Metalink: \(error)")
        }
    }

    /// One plan per `<file>`, in document order; all or none.
    /// - Throws: ``RPCError`` naming the first file without an http(s) URL (nothing is added then).
    public static func plans(_ metalink: Metalink) throws(RPCError) -> [MetalinkFilePlan] {
        try metalink.files.map { file throws(RPCError) in
            guard let plan = MetalinkFilePlan(file, checkable: Checksum.engineComputes) else {
                throw .aria2(
                    "Metalink: file '\(file.name)' has no http or https URL (metaurls, torrents and other schemes are not downloaded).")
            }
            return plan
        }
    }
}
