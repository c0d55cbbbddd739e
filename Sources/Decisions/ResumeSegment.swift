/// One byte range of a segmented download.
public struct ResumeSegment: Sendable, Hashable {
    /// First byte offset of the segment in the file.
    public var start: Int64
    /// Offset one past the last byte (exclusive), or `nil` while the end is unknown (stored as `-1`).
    public var end: Int64?
    /// Bytes written durably from `start`, contiguous.
    public var written: Int64

    /// Creates a segment.
    /// - Parameters:
    ///   - start: First byte offset.
    ///   - end: Exclusive end offset, or `nil` if unknown.
    ///   - written: Contiguous durable bytes from `start`.
    public init(start: Int64, end: Int64?, written: Int64) {
        self.start = start
        self.end = end
        self.written = written
    }
}
