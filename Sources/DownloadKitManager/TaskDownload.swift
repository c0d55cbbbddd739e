import DownloadKit
import Foundation
import HTTPClient

extension ManagedTask {
    /// A task metadata key that older builds stored the task's range connections under (a decimal
    /// count). The stores still read it from rows written before ``connections`` had a column of its own
    /// (``connections(stored:metadata:)``); nothing writes it any more.
    public static let legacyConnectionsMetadataKey = "downloadkit.connections"

    /// The request and the configuration that download this task: the one mapping from a task to a
    /// transfer, for the ``DownloadManager`` and the PostgreSQL fleet's worker alike.
    ///
    /// The request carries the task's URL (its current URL as the replacement when it was refreshed), its
    /// destination, header fields (sorted by name, then `extraHeaders`), checksum, mirrors and piece checksums. The configuration is
    /// `base` with its own rate limit replaced by `limiters` (the caller's global bucket and the task's
    /// own, shared with whatever else draws from them), the task's ``connections`` and
    /// ``connectionsPerSource`` when it has them.
    public func download(
        base: DownloadConfiguration, limiters: [TokenBucket], extraHeaders: [(String, String)] = []
    ) -> (request: DownloadRequest, configuration: DownloadConfiguration) {
        var configuration = base
        configuration.rateLimit = nil
        configuration.sharedRateLimiters += limiters
        if let connections, connections > 0 { configuration.connections = connections }
        if let connectionsPerSource, connectionsPerSource > 0 { configuration.connectionsPerSource = connectionsPerSource }
        let fields = headers.sorted { $0.key < $1.key }.map { ($0.key, $0.value) } + extraHeaders
        var request = DownloadRequest(
            url: originalURL, destination: destination, headers: DKHTTPHeaders(fields), checksum: checksum,
            replacementURL: currentURL == originalURL ? nil : currentURL)
        request.mirrors = mirrors
        request.pieceChecksums = pieceChecksums
        return (request, configuration)
    }

    /// The task's connection count as a store reads it back: its own column when set, else the
    /// ``legacyConnectionsMetadataKey`` of a row written by an older build; a count outside 1…64 (a damaged
    /// row) reads as none. Returns the metadata without the legacy key, so the count lives in one place.
    @_spi(DownloadKitInternal) public static func connections(
        stored: Int64?, metadata: [String: String]
    ) -> (connections: Int?, metadata: [String: String]) {
        var metadata = metadata
        let legacy = metadata.removeValue(forKey: legacyConnectionsMetadataKey).flatMap { Int64($0) }
        guard let count = stored ?? legacy, (1...64).contains(count) else { return (nil, metadata) }
        return (Int(count), metadata)
    }

    /// The task's connections per source as a store reads it back: a count outside 1…64 (a damaged row)
    /// reads as none.
    @_spi(DownloadKitInternal) public static func connectionsPerSource(stored: Int64?) -> Int? {
        guard let stored, (1...64).contains(stored) else { return nil }
        return Int(stored)
    }
}
