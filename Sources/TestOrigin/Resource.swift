/// A downloadable file served by ``FaultOrigin``, with range support, validators and scripted faults.
///
/// The body is ``TestPattern`` bytes for `seed` (generated while sending, so a multi-GiB resource costs
/// no memory) unless an explicit `body` is given. Range handling follows RFC 9110 §14: one range per
/// request (`bytes=a-b`, `bytes=a-`, `bytes=-n`) gets a 206 with `Content-Range`; an unsatisfiable range
/// gets a 416 with `Content-Range: bytes */size`; `If-Range` is honoured with a strong ETag comparison or
/// an exact `Last-Modified` match; anything else (multiple ranges, bad syntax, non-GET) gets a 200.
public struct Resource: Sendable {
    /// The length of the body in bytes. Ignored when `body` is set (its count is used).
    public var size: Int64
    /// The ``TestPattern`` seed of the body.
    public var seed: UInt64
    /// An explicit body used instead of the pattern (for small, hand-written contents).
    public var body: [UInt8]?
    /// The `ETag` sent, including its quotes (and `W/` for a weak tag), or `nil` for none.
    public var etag: String?
    /// The `Last-Modified` value sent, or `nil` for none.
    public var lastModified: String?
    /// Whether `Accept-Ranges: bytes` is sent.
    public var acceptRanges: Bool
    /// Whether a `Range` header is acted on; when `false` every GET is answered with a 200 and the full
    /// body (a server that does not support ranges, whatever it advertises).
    public var honorsRanges: Bool
    /// The `Content-Type` sent.
    public var contentType: String
    /// A `Content-Disposition` value to send, or `nil`.
    public var contentDisposition: String?
    /// A `Content-MD5` value to send, or `nil`.
    public var contentMD5: String?
    /// Whether the body is sent with `Transfer-Encoding: chunked` instead of `Content-Length`.
    public var chunked: Bool
    /// Pacing for the body in bytes per second, per response (sleep-based), or `nil` for full speed.
    public var bytesPerSecond: Int?
    /// Extra header fields added to every response for this resource.
    public var extraHeaders: [(String, String)]
    /// Scripted misbehaviour, applied in the order listed where several apply to one response.
    public var faults: [Fault]

    /// A marker meaning "derive a strong ETag from the contents"; the default for `etag` in the initialisers.
    public static let automaticETag: String? = "\u{0}automatic"

    /// The default `Last-Modified` value, a fixed date so runs are reproducible.
    public static let defaultLastModified = "Mon, 01 Jan 2024 00:00:00 GMT"

    /// A pattern-bodied resource.
    ///
    /// - Parameters:
    ///   - size: The body length in bytes.
    ///   - seed: The ``TestPattern`` seed.
    ///   - etag: The ETag with its quotes; `nil` for none. The default, ``automaticETag``, stands for the
    ///     strong ETag ``derivedETag(seed:size:)``, so resources with different contents differ.
    ///   - lastModified: By default ``defaultLastModified``; pass `nil` for none.
    public init(
        size: Int64,
        seed: UInt64 = 1,
        etag: String? = Resource.automaticETag,
        lastModified: String? = Resource.defaultLastModified,
        acceptRanges: Bool = true,
        honorsRanges: Bool = true,
        contentType: String = "application/octet-stream",
        contentDisposition: String? = nil,
        contentMD5: String? = nil,
        chunked: Bool = false,
        bytesPerSecond: Int? = nil,
        extraHeaders: [(String, String)] = [],
        faults: [Fault] = []
    ) {
        precondition(size >= 0, "a resource size is non-negative")
        self.size = size
        self.seed = seed
        self.body = nil
        self.etag = etag == Resource.automaticETag ? Resource.derivedETag(seed: seed, size: size) : etag
        self.lastModified = lastModified
        self.acceptRanges = acceptRanges
        self.honorsRanges = honorsRanges
        self.contentType = contentType
        self.contentDisposition = contentDisposition
        self.contentMD5 = contentMD5
        self.chunked = chunked
        self.bytesPerSecond = bytesPerSecond
        self.extraHeaders = extraHeaders
        self.faults = faults
    }

    /// A resource with an explicit body. Same defaults as ``init(size:seed:etag:lastModified:acceptRanges:honorsRanges:contentType:contentDisposition:contentMD5:chunked:bytesPerSecond:extraHeaders:faults:)``.
    public init(
        body: [UInt8],
        etag: String? = Resource.automaticETag,
        lastModified: String? = Resource.defaultLastModified,
        acceptRanges: Bool = true,
        contentType: String = "application/octet-stream",
        faults: [Fault] = []
    ) {
        self.init(
            size: Int64(body.count), seed: 0, etag: etag, lastModified: lastModified, acceptRanges: acceptRanges,
            contentType: contentType, faults: faults)
        self.body = body
        if etag == Resource.automaticETag { self.etag = "\"body-\(body.count)-\(Self.checksum(body))\"" }
    }

    /// The strong ETag used by default for a pattern body: `"dk-<seed hex>-<size>"`.
    public static func derivedETag(seed: UInt64, size: Int64) -> String {
        "\"dk-\(String(seed, radix: 16))-\(size)\""
    }

    /// The bytes of the body at `offset ..< offset + count` (for checking downloads in tests).
    public func bytes(offset: Int64 = 0, count: Int? = nil) -> [UInt8] {
        let length = count ?? Int(effectiveSize - offset)
        if let body {
            return Array(body[Int(offset)..<Int(offset) + length])
        }
        return TestPattern.bytes(offset: offset, count: length, seed: seed)
    }

    /// The body length actually served (`body.count` when an explicit body is set).
    public var effectiveSize: Int64 { body.map { Int64($0.count) } ?? size }

    private static func checksum(_ bytes: [UInt8]) -> String {
        // FNV-1a, only to make default ETags of different explicit bodies differ.
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325
        for byte in bytes { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01B3 }
        return String(hash, radix: 16)
    }
}

/// Scripted misbehaviour of a ``Resource``.
///
/// Counting rules: "requests" are all requests (GET and HEAD) routed to the resource since it was last
/// registered with ``FaultOrigin/serve(_:_:)``, numbered from 0. The truncating faults (`resetAfter`,
/// `closeAfter`, `stallAfter`) count only GET responses that carry a body (200 or 206) and apply to the
/// first `times` of those, whether or not the body is long enough to reach the cut. `bytes` counts body
/// bytes of that response (not absolute offsets in the file).
public enum Fault: Sendable {
    /// Send `bytes` body bytes, wait (bounded) until the kernel has handed them to the peer, then reset
    /// the connection (`SO_LINGER {1, 0}` and close → RST).
    case resetAfter(bytes: Int64, times: Int)
    /// Send `bytes` body bytes, then close the connection cleanly (FIN): a short body.
    case closeAfter(bytes: Int64, times: Int)
    /// Send `bytes` body bytes, pause for `seconds`, then send the rest.
    case stallAfter(bytes: Int64, seconds: Double, times: Int)
    /// Answer ranged requests with a 206 whose `Content-Range` (and body) start `delta` bytes away from the
    /// requested start (clamped to the resource), with the requested length where possible.
    case wrongContentRangeStart(delta: Int64)
    /// Ignore `Range`: always a 200 with the full body.
    case ignoreRanges
    /// Answer the first `first` requests with `status`, these extra headers and a short text body
    /// (e.g. 503 with `Retry-After`, or 403 for an expired signed URL).
    case statusForRequests(status: Int, first: Int, headers: [(String, String)])
    /// From request number `requests` on (0-based; so after `requests` requests), the resource is modified:
    /// the body is the pattern for `newSeed` and the ETag is `newETag`; `Last-Modified` becomes
    /// `newLastModified` (omitted when `nil`).
    case changeValidatorAfter(requests: Int, newSeed: UInt64, newETag: String, newLastModified: String? = nil)
    /// Send a chunked body whose second chunk-size line is not hexadecimal, then close.
    case malformedChunks
    /// Pad the response head with an `X-Padding` field so the head is at least `bytes` long.
    case hugeHead(bytes: Int)
    /// Announce the body length truthfully in the head but send `extra` more bytes, then close.
    case bodyLongerThanAnnounced(extra: Int)
    /// Send every byte of the file at offsets `range` inverted (XOR 0xFF), in every response that covers
    /// them: a mirror with a corrupt block (piece checksums).
    case corruptBytes(Range<Int64>)
    /// Wait `seconds` before every response head: a server's turnaround, standing in on loopback for a
    /// real path's round trip.
    case delayHead(seconds: Double)
}
