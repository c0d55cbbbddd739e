extension RecordedRequest {
    /// The bytes a `Range: bytes=FIRST-LAST` request asked for; nil for a request without one or with any
    /// other form (suffix, open-ended, several ranges). Tests read an origin's log with it: which pieces a
    /// client asked of which source.
    public var byteRange: Range<Int64>? {
        guard let value = header("Range"), value.hasPrefix("bytes=") else { return nil }
        let parts = value.dropFirst(6).split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count == 2, let first = Int64(parts[0]), let last = Int64(parts[1]), first <= last else { return nil }
        return first..<last + 1
    }
}
