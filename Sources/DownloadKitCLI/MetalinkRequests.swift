@_spi(DownloadKitInternal) import DownloadKit
import DownloadKitMetalink
import Foundation
import HTTPClient
import HTTPWire

/// What `get --metalink FILE` downloads: one planned request per `<file>` of the document, decided from the
/// parsed model alone (no I/O), so the rules live in one place.
struct MetalinkDownload: Sendable {
    /// The request: the best-priority http(s) URL, the others as mirrors, the strongest supported hash and
    /// piece hashes.
    var request: DownloadRequest
    /// The Metalink's `<size>`, when it states one. Checked against the download only when no hash is
    /// checked (a hash of the whole file already fails a download of another length).
    var expectedSize: Int64?
    /// Lines to print before downloading (skipped metaurls/torrents and non-http URLs, hashes or piece hashes not checked).
    var notes: [String]
}

/// Why a Metalink cannot be downloaded as given: a usage/input error naming the file or option.
struct MetalinkInputError: Error, CustomStringConvertible {
    var description: String
}

enum MetalinkRequests {
    /// Reads and parses `path` (bounded by `MetalinkLimits.maxBytes` before reading it whole).
    /// - Throws: ``MetalinkInputError`` naming the file, and the line and column of a parse error.
    static func load(_ path: String, limits: MetalinkLimits = .default) throws(MetalinkInputError) -> Metalink {
        let attributes = try? FileManager.default.attributesOfItem(atPath: path)
        if let size = attributes?[.size] as? Int, size > limits.maxBytes {
            throw MetalinkInputError(
                description: "--metalink \(path): sizeLimitExceeded: \(size) bytes, more than \(limits.maxBytes) (maxBytes)")
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw MetalinkInputError(description: "--metalink \(path): cannot read the file")
        }
        do {
            return try Metalink(parsing: [UInt8](data), limits: limits)
        } catch {
            throw MetalinkInputError(description: "--metalink \(path): \(error)")
        }
    }

    /// The checksum the engine checks for `file`: its strongest hash among the algorithms the engine
    /// computes (SHA-224 has none in the engine; a document with only SHA-224 gets `nil` and a note).
    static func checksum(for file: MetalinkFile) -> Checksum? {
        let supported = file.hashes.filter { DigestAlgorithm(rawValue: $0.algorithm.compactName) != nil }
        guard let strongest = supported.max(by: { $0.algorithm < $1.algorithm }),
            let algorithm = DigestAlgorithm(rawValue: strongest.algorithm.compactName)
        else { return nil }
        return Checksum(
            algorithm: algorithm, expectedHex: strongest.bytes.map { String(format: "%02x", $0) }.joined())
    }

    /// The piece hashes the engine verifies for `file`: its strongest piece list among the algorithms the
    /// engine computes (nil without one).
    static func pieceChecksums(for file: MetalinkFile) -> PieceChecksums? {
        let supported = file.pieces.filter { DigestAlgorithm(rawValue: $0.algorithm.compactName) != nil }
        guard let strongest = supported.max(by: { $0.algorithm < $1.algorithm }),
            let algorithm = DigestAlgorithm(rawValue: strongest.algorithm.compactName)
        else { return nil }
        return PieceChecksums(algorithm: algorithm, pieceLength: strongest.length, digests: strongest.hashes.map(\.bytes))
    }

    /// One ``MetalinkDownload`` per file of `metalink`, in document order.
    /// - Parameters:
    ///   - source: the Metalink's path, for messages.
    ///   - output: `-o FILE`: allowed only for a document with one file.
    ///   - directory: `-d DIR` (the files' names, already refused when unsafe by the parser, go beneath it).
    /// - Throws: ``MetalinkInputError`` for `-o` with several files or a file without an http(s) URL.
    static func plan(
        _ metalink: Metalink, source: String, output: String?, directory: String, headers: DKHTTPHeaders
    ) throws(MetalinkInputError) -> [MetalinkDownload] {
        if output != nil && metalink.files.count > 1 {
            throw MetalinkInputError(
                description: "-o FILE takes a Metalink with one file; --metalink \(source) holds \(metalink.files.count) (use -d DIR)")
        }
        return try metalink.files.map { file throws(MetalinkInputError) in
            let http = file.httpURLs.map(\.url)
            guard let first = http.first else {
                throw MetalinkInputError(
                    description: "--metalink \(source): file '\(file.name)' has no http or https URL (metaurls and other schemes are not downloaded)")
            }
            var notes: [String] = []
            let skipped = file.metaURLs.count + file.urls.count - http.count
            if skipped > 0 {
                notes.append(
                    "\(file.name): \(skipped) URL(s) skipped (metaurls, torrents and non-http schemes are not downloaded)")
            }
            let checksum = checksum(for: file)
            if checksum == nil && !file.hashes.isEmpty {
                notes.append("\(file.name): no hash the engine computes (only \(file.hashes.map(\.algorithm.rawValue).joined(separator: ", "))); not verified")
            }
            let pieces = pieceChecksums(for: file)
            if pieces == nil && !file.pieces.isEmpty {
                notes.append(
                    "\(file.name): no piece hashes the engine computes (only \(file.pieces.map(\.algorithm.rawValue).joined(separator: ", "))); pieces not verified")
            }
            let destination =
                output ?? (directory.hasSuffix("/") ? directory + file.name : directory + "/" + file.name)
            var request = DownloadRequest(
                url: first, destination: .file(destination), headers: headers, checksum: checksum)
            request.mirrors = Array(http.dropFirst())
            request.pieceChecksums = pieces
            return MetalinkDownload(
                request: request, expectedSize: checksum == nil ? file.size : nil, notes: notes)
        }
    }
}
