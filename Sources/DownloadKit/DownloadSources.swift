/// Why a source of a download with mirrors (``DownloadRequest/mirrors``) was dropped. Published in the
/// download's events (``DownloadStateReason/sourceDropped(source:reason:)``) and kept in
/// ``DownloadResult/sources``. The agreement rule is in docs/MIRRORS.md.
public enum SourceDropReason: Sendable, Hashable, CustomStringConvertible {
    /// The source's total length differs from the first source's (nil: it gave none).
    case differentLength(expected: Int64, got: Int64?)
    /// Both sources send `Last-Modified` and the values differ: another version of the file.
    case differentLastModified(expected: String, got: String)
    /// The sample the source served for this range differs from the bytes the first source wrote there.
    case differentBytes(Range<Int64>)
    /// The source answered a range request with this status instead of a 206 (200: it ignores ranges,
    /// and a whole body cannot be cut into another source's segments).
    case noRangeSupport(status: Int)
    /// The source failed past its retries (refused, reset, 5xx, a wrong answer): the last error.
    case failed(DownloadError)
    /// The source stayed below ``DownloadConfiguration/lowSpeedLimit`` while another source was left.
    case tooSlow(bytesPerSecond: Int)
    /// Its answers needed a sample, and no agreeing source was left to write bytes to compare it with.
    case unverifiable
    /// It sent `count` pieces that failed their piece checksum (``DownloadRequest/pieceChecksums``):
    /// demoted after the first, dropped at the second while another source is left.
    case badPieces(count: Int)

    public var description: String {
        switch self {
        case .differentLength(let expected, let got):
            return "its length is \(got.map(String.init) ?? "unknown"), the first source's \(expected)"
        case .differentLastModified(let expected, let got):
            return "its Last-Modified is \(got), the first source's \(expected)"
        case .differentBytes(let range):
            return "its bytes \(range.lowerBound)-\(range.upperBound - 1) differ from the first source's"
        case .noRangeSupport(let status):
            return "it answered a range request with \(status), not 206"
        case .failed(let error):
            return "it failed: \(error.detail)"
        case .tooSlow(let rate):
            return "too slow (\(rate) bytes/s)"
        case .unverifiable:
            return "nothing from an agreeing source to compare a sample with (no Last-Modified to compare)"
        case .badPieces(let count):
            return "it sent \(count) pieces that failed their piece checksum"
        }
    }
}

/// What one source of a download gave (``DownloadResult/sources``).
public struct SourceUsage: Sendable, Hashable {
    /// The source's URL without its password (``HTTPURL/listingDescription``).
    public var url: String
    /// Bytes of the file this source served in this run (credited: written and counted once).
    public var bytes: Int64
    /// Why the source was dropped; nil when it served to the end (or was never needed).
    public var dropReason: SourceDropReason?
    /// With piece checksums: pieces it sent that failed their check in this run.
    public var badPieces: Int = 0
    /// With piece checksums: pieces fetched again from it (after another copy failed) in this run.
    public var refetchedPieces: Int = 0

    /// Creates a usage record.
    public init(url: String, bytes: Int64, dropReason: SourceDropReason? = nil, badPieces: Int = 0, refetchedPieces: Int = 0) {
        self.url = url
        self.bytes = bytes
        self.dropReason = dropReason
        self.badPieces = badPieces
        self.refetchedPieces = refetchedPieces
    }
}
