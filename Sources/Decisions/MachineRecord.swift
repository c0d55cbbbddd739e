import HTTPWire

/// What a download's resume record says of the resource and its partial data, as the download's machine
/// reads it before the first request: the identity, the validators, the length, the name and how many bytes
/// (or which segments) were checkpointed. DownloadKit makes it from its `ResumeInfo` in one place.
package struct MachineRecord: Sendable, Hashable {
    /// The download's original URL as recorded (its identity); nil when the recorded text is no URL.
    package var originalURL: HTTPURL?
    /// The `ETag` field as the server sent it.
    package var entityTag: String?
    package var lastModified: String?
    package var totalLength: Int64?
    package var acceptsRanges: Bool?
    /// The name decided from a response (directory destinations).
    package var fileName: String?
    /// Bytes checkpointed from byte 0 (one connection).
    package var bytesReceived: Int64
    /// The segment map of a segmented download; empty on one connection.
    package var segments: [ResumeSegment]

    package init(
        originalURL: HTTPURL?, entityTag: String?, lastModified: String?, totalLength: Int64?, acceptsRanges: Bool?,
        fileName: String?, bytesReceived: Int64, segments: [ResumeSegment]
    ) {
        self.originalURL = originalURL
        self.entityTag = entityTag
        self.lastModified = lastModified
        self.totalLength = totalLength
        self.acceptsRanges = acceptsRanges
        self.fileName = fileName
        self.bytesReceived = bytesReceived
        self.segments = segments
    }
}
