@_spi(DownloadKitInternal) import DownloadKit
import DownloadKitMetalink
import DownloadKitRPC
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
            guard let sources = MetalinkFilePlan(file, checkable: Checksum.engineComputes) else {
                throw MetalinkInputError(
                    description: "--metalink \(source): file '\(file.name)' has no http or https URL (metaurls and other schemes are not downloaded)")
            }
            let notes = sources.notes
            let checksum = sources.hash.flatMap(Checksum.init(metalink:))
            let destination =
                output ?? (directory.hasSuffix("/") ? directory + file.name : directory + "/" + file.name)
            var request = DownloadRequest(
                url: sources.url, destination: .file(destination), headers: headers, checksum: checksum)
            request.mirrors = sources.mirrors
            request.pieceChecksums = sources.pieces.flatMap(PieceChecksums.init(metalink:))
            return MetalinkDownload(request: request, expectedSize: sources.sizeToCheck, notes: notes)
        }
    }
}
