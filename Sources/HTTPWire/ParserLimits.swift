/// Bounds on what ``ResponseParser`` accepts from a peer before it gives up with a ``WireError``.
///
/// Limits are data, not constants in the parser, so a caller can tighten them (fuzzing, hostile
/// origins) or relax them (servers with huge cookies) without touching the grammar. Every limit names
/// itself in the error detail when it is exceeded.
public struct ParserLimits: Sendable, Hashable {
    /// Maximum bytes in one response head: status line, field lines and the empty line that ends
    /// the head, line terminators included. Interim (1xx) heads are counted separately, each
    /// against this same limit. Default 64 KiB.
    public var maxHeadBytes: Int
    /// Maximum number of field lines in one response head. Default 256.
    public var maxHeaderCount: Int
    /// Maximum hexadecimal digits in a chunk size, leading zeros included. Default 16, the most
    /// that can describe a 64-bit length.
    public var maxChunkSizeDigits: Int
    /// Maximum bytes in one chunk-size line (size, whitespace and chunk extensions), not counting
    /// its CRLF. Default 4096.
    public var maxChunkLineBytes: Int
    /// Maximum bytes in the trailer section after the last chunk, line terminators included.
    /// Default 16 KiB.
    public var maxTrailerBytes: Int
    /// Maximum interim (1xx) responses before the final one. Default 16: a server that sends
    /// `100 Continue` forever would otherwise keep a download waiting without a byte of body.
    public var maxInterimResponses: Int = 16

    /// Creates limits; every argument defaults to the value of ``default``.
    public init(
        maxHeadBytes: Int = 64 * 1024,
        maxHeaderCount: Int = 256,
        maxChunkSizeDigits: Int = 16,
        maxChunkLineBytes: Int = 4096,
        maxTrailerBytes: Int = 16 * 1024
    ) {
        self.maxHeadBytes = maxHeadBytes
        self.maxHeaderCount = maxHeaderCount
        self.maxChunkSizeDigits = maxChunkSizeDigits
        self.maxChunkLineBytes = maxChunkLineBytes
        self.maxTrailerBytes = maxTrailerBytes
    }

    /// 64 KiB heads, 256 fields, 16 chunk-size digits, 4 KiB chunk lines, 16 KiB trailers, 16 interim responses.
    public static let `default` = ParserLimits()
}
