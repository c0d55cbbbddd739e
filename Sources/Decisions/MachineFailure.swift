import HTTPWire

/// Each failure the download machine decides itself, with the facts that name its cause — a value, so the
/// decision can be tested without the error type the library reports. The library turns each into its
/// error in one place (``MachineError/init(decided:)``: code, message, status, whether it is transient);
/// the machine never spells a message.
package enum MachineFailure: Sendable, Hashable {
    /// The accepted 206's body runs past the last byte of its Content-Range.
    case bodyPastRange(lastByte: Int64)
    /// The transfer stayed below the low-speed limit for its whole window.
    case tooSlow(bytesPerSecond: Int, seconds: Int, limit: Int)
    /// The body is not the one the response's Content-MD5 states.
    case contentMD5Mismatch(stated: [UInt8])
    /// The partial holds fewer (or more) bytes than the resource's length at the end.
    case truncated(expected: Int64, received: Int64)
    /// The request's piece table has `digests` digests, but a file of `total` bytes in pieces of
    /// `pieceLength` has `expected` pieces (``pieceTable(digests:pieceLength:total:)``).
    case pieceCount(digests: Int, total: Int64, pieceLength: Int64, expected: Int)
    /// A piece of a download that ran on one connection failed its check.
    case pieceMismatch(piece: Int, range: Range<Int64>, algorithm: String)
    /// The whole file's digest is not the one expected: the caller's, or (`statedByServer`) the one the
    /// response's digest header states.
    case checksumMismatch(algorithm: String, computed: String, expected: String, statedByServer: Bool)
    /// The server answered with a status that ends this request (`reason`: its phrase, possibly empty).
    case status(Int, reason: String, url: HTTPURL)
    /// A redirect without a Location field.
    case redirectWithoutLocation(status: Int, from: HTTPURL)
    /// A redirect whose Location is no usable URL (`location` already redacted).
    case unusableRedirect(status: Int, location: String, detail: String)
    /// A redirect from https to http that the configuration does not allow.
    case redirectToHTTP(status: Int, target: HTTPURL)
    /// More redirects than the configuration's limit, counted from the original URL.
    case tooManyRedirects(limit: Int, from: HTTPURL)
    /// A redirect to a URL already visited in this chain.
    case redirectLoop(HTTPURL)
    /// A range answer that contradicts the request or itself (transient: a retry may find it right).
    case rangeMismatch(status: Int, detail: String)
    /// More body bytes than the resource's length.
    case tooManyBytes(received: Int64, total: Int64)
    /// An answer for the rest of the resource that carried no byte of it.
    case noBodyBytes(offset: Int64, total: Int64)
    /// The URL provider returned something that is no URL (`url` already redacted).
    case invalidProvidedURL(String)
    /// The resource changed (or its length, or the server ignored the range) more times in this run than
    /// the restart policy allows.
    case restartsExhausted(count: Int, last: RestartReason)
    /// An event arrived that the machine's state cannot take: a bug of the executor.
    case internalError(String)
}

extension MachineFailure {
    /// Whether a piece table of `digests` digests of pieces of `pieceLength` bytes describes a file of
    /// `total` bytes — one digest per piece (``PieceVerifier/pieceCount(total:pieceLength:)``) — or the
    /// failure naming both counts. The table alone (a positive piece length, digests of the algorithm's
    /// length) is checked before the download starts.
    package static func pieceTable(digests: Int, pieceLength: Int64, total: Int64) -> MachineFailure? {
        let expected = PieceVerifier.pieceCount(total: total, pieceLength: pieceLength)
        guard digests != expected else { return nil }
        return .pieceCount(digests: digests, total: total, pieceLength: pieceLength, expected: expected)
    }
}

/// What the download machine reads of a failure it is told of (``MachineFailure`` for the ones it makes
/// itself): whether a retry may help, and whether the caller stopped the download.
package protocol MachineError: Error, Sendable, Hashable {
    /// The error the library reports for a failure the machine decided.
    init(decided failure: MachineFailure)
    /// Retrying later from the durable bytes may succeed.
    var isTransient: Bool { get }
    /// The caller cancelled: never retried.
    var isCancellation: Bool { get }
}
