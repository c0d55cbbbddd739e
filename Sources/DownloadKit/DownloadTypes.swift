import DownloadKitDecisions
import Foundation
import HTTPClient
import HTTPWire
import Logging

/// What to download and where.
public struct DownloadRequest: Sendable {
    /// The URL that identifies the download (its identity across redirects and URL refreshes).
    public var url: String
    /// Where the finished file goes.
    public var destination: DownloadDestination
    /// Where the temp file and resume info live. Defaults to the destination's directory (so the final
    /// move is a same-file-system `rename`).
    public var workingDirectory: String?
    /// Extra request header fields. `Authorization`, `Cookie` and `Proxy-Authorization` are never sent
    /// to another origin after a redirect.
    public var headers: DKHTTPHeaders
    /// A checksum checked before the final rename.
    public var checksum: Checksum?
    /// Resume data from ``Download/pause()`` or an Apple NSURLSession resume-data plist.
    public var resumeData: Data?
    /// A replacement URL for the partial data (expiring signed URLs): the download continues from its
    /// partial bytes at this URL when the server's validator still matches, and restarts otherwise.
    public var replacementURL: String?
    /// What to do when the destination (a `.file`) already exists complete. Default ``ExistingFilePolicy/replace``.
    public var existingFile: ExistingFilePolicy = .replace
    /// Names of further ``headers`` that carry credentials (`X-Api-Key`, `X-Auth-Token`, …): like
    /// `Authorization`, `Cookie` and `Proxy-Authorization` they are dropped when a redirect leads to
    /// another origin. Case-insensitive.
    public var credentialHeaderNames: [String] = []
    /// Further URLs of the same file (aria2's `aria2c URL1 URL2 …`): its segments are spread over ``url``
    /// and these (docs/MIRRORS.md). ``url`` fixes the resource (length, `Last-Modified`, the resume
    /// validators); a mirror's bytes are mixed in only once it proved to serve the same bytes — an equal
    /// length and an equal `Last-Modified`, or, when either has none, a sample range equal to bytes
    /// already written — and a mirror that disagrees or fails is dropped with a ``SourceDropReason``.
    /// Each source holds at most ``DownloadConfiguration/connectionsPerSource`` connections.
    /// Credential headers (`Authorization`, `Cookie`, ``credentialHeaderNames``) go only to mirrors of
    /// ``url``'s origin. Empty (the default): one source.
    ///
    /// ```swift
    /// var request = DownloadRequest(url: "https://a.example/f.iso", destination: .file("f.iso"))
    /// request.mirrors = ["https://b.example/f.iso", "https://c.example/pub/f.iso"]
    /// ```
    public var mirrors: [String] = []
    /// Piece hashes of the file (a Metalink's `<pieces>`; docs/MIRRORS.md, "Piece checksums"). Each piece
    /// is hashed from the file as soon as all its bytes are written; a bad piece is fetched again from
    /// another source (else the same one once more) and the source that sent it is demoted, then dropped
    /// at its second bad piece (``SourceDropReason/badPieces(count:)``). The download fails with
    /// ``DownloadError/Code/pieceChecksumMismatch`` naming the piece only when no source gives a good copy.
    /// A resumed download trusts only the pieces its journal recorded as verified and hashes the others
    /// it finds written. The digest count must be ⌈length ÷ pieceLength⌉ once the length is known
    /// (``DownloadError/Code/invalidPieceChecksums`` before any byte is written). A download with piece
    /// checksums is segmented (as one with mirrors) when the server allows ranges; on one connection the
    /// pieces are checked before the final rename. nil (the default): no piece checks.
    public var pieceChecksums: PieceChecksums?

    /// Creates a request.
    public init(
        url: String, destination: DownloadDestination, workingDirectory: String? = nil,
        headers: DKHTTPHeaders = DKHTTPHeaders(), checksum: Checksum? = nil, resumeData: Data? = nil,
        replacementURL: String? = nil
    ) {
        self.url = url
        self.destination = destination
        self.workingDirectory = workingDirectory
        self.headers = headers
        self.checksum = checksum
        self.resumeData = resumeData
        self.replacementURL = replacementURL
    }
}

extension DownloadRequest {
    /// Creates a request from Foundation `URL`s: `url` must be http or https; `destination` a file URL.
    public init(
        url: URL, destination: URL, headers: DKHTTPHeaders = DKHTTPHeaders(), checksum: Checksum? = nil,
        resumeData: Data? = nil
    ) {
        self.init(
            url: url.absoluteString, destination: .file(destination.path), headers: headers, checksum: checksum,
            resumeData: resumeData)
    }
}

extension DownloadDestination {
    /// The final file at a file `URL`.
    public static func file(_ url: URL) -> DownloadDestination { .file(url.path) }
    /// A directory given as a file `URL`, the name chosen by `naming`.
    public static func directory(_ url: URL, naming: FileNamingRule) -> DownloadDestination {
        .directory(url.path, naming: naming)
    }
}

/// Knobs for one download. Sizes are in bytes.
public struct DownloadConfiguration: Sendable {
    /// Redirects allowed before failing with `tooManyRedirects`. Default 10.
    public var maxRedirects: Int
    /// Whether an https URL may redirect to http. Default false.
    public var allowsInsecureRedirects: Bool
    /// Retries after transient failures (reset, timeout, 408, 429, 5xx). Default 5. A retry that
    /// made progress (≥ 64 KiB) does not count against the limit.
    public var retries: Int
    /// First backoff delay; doubles each retry, with equal jitter (a random delay between half and all
    /// of it), up to ``maxRetryDelay``. Default 0.5 s.
    public var retryBaseDelay: Duration
    /// Longest backoff delay (a server's `Retry-After` may ask for more, up to 10 minutes). Default 30 s.
    public var maxRetryDelay: Duration
    /// The transfer counts as stalled (transient) below this many bytes per second for
    /// ``lowSpeedTime``, like curl's `--speed-limit`. 0 disables. Default 1.
    public var lowSpeedLimit: Int
    /// See ``lowSpeedLimit``. Default 30 s.
    public var lowSpeedTime: Duration
    /// A checkpoint (fdatasync + resume info) is written at most this often while bytes arrive. Default 2 s.
    public var checkpointInterval: Duration
    /// Minimum spacing of progress events. Default 0.25 s.
    public var progressInterval: Duration
    /// Bytes per second for this download; nil is unlimited.
    public var rateLimit: Int?
    /// Token buckets shared with other downloads (a manager's global limit). The download waits for
    /// the slowest of these and its own ``rateLimit``.
    public var sharedRateLimiters: [TokenBucket] = []
    /// The file-system seam of this download (``FileIOHooks``): a fleet worker's write fence, faults a
    /// test injects. Handed by the engine to every write of the working files; nothing process-wide.
    @_spi(DownloadKitInternal) public var fileIO = FileIOHooks()
    /// Called when the server answers 401/403/404/410: return a fresh URL to continue from the
    /// partial data (seed 002's expiring CDN URLs), or nil to fail.
    public var urlProvider: (@Sendable (URLRefreshContext) async -> String?)?
    /// How many times the URL provider may be asked per download. Default 3.
    public var maxURLRefreshes: Int
    /// Reserve disk space for the remaining bytes up front (fallocate, size unchanged). Default true.
    ///
    /// Only when at least 1 MiB remains: a smaller body is allocated in one piece by the file system's
    /// delayed allocation when it is synced, and reserving it first only leaves unwritten extents for that
    /// sync to convert (a cost per file among thousands of small ones). Free space is checked for every
    /// body either way: one that cannot fit fails with `insufficientSpace` before a byte is written.
    public var preallocates: Bool
    /// Connections for one file (segmented download). Default 1. With more, the download probes
    /// with `Range: bytes=0-0` and splits only when the server honours ranges and reports a length;
    /// otherwise it stays on one connection and says why (``DownloadStateReason/singleConnection(_:)``).
    /// Capped by the client's `maxConnectionsPerOrigin`.
    public var connections: Int = 1
    /// With mirrors (``DownloadRequest/mirrors``): the most connections one source holds at once. Default
    /// 1, as aria2's `max-connection-per-server`. ``connections`` stays the total, raised to the number of
    /// sources when smaller (each source gets a connection); a mirror not yet proved to agree holds one.
    /// Capped by the client's `maxConnectionsPerOrigin`.
    public var connectionsPerSource: Int = 1
    /// RFC 6249 (Metalink/HTTP): up to this many `Link: <URL>; rel=duplicate` targets of the first
    /// response join a segmented download as mirrors (best first; absolute `http`/`https` URLs without
    /// userinfo, never sent credential headers; checked by the agreement rule like ``DownloadRequest/mirrors``
    /// and listed after them in ``DownloadResult/sources``). Default 4; 0 turns it off.
    public var maxLinkMirrors: Int = 4
    /// RFC 6249: when the request has no ``DownloadRequest/checksum``, a `Repr-Digest` or `Digest` header
    /// of a response of the whole file (a 200, or a 206 of every byte) is checked as the whole-file
    /// checksum before the final rename (the strongest algorithm the engine computes; the file is read
    /// once more to hash it). Default true.
    public var checksDigestHeader: Bool = true
    /// Segments are never split below this many bytes. Default 1 MiB.
    public var minimumSegmentSize: Int64 = 1 << 20
    /// Whether downloads write whole 4 KiB blocks with `O_DIRECT`, past the page cache, where the file
    /// system allows it (ext4 and XFS; partial blocks, and other file systems, go through the page cache).
    /// Default true. Two paths use it: the workers of a segmented download, and a single-connection body
    /// of 64 to 256 KiB, gathered in memory and written in one piece instead of spliced into the page
    /// cache.
    ///
    /// Copying each byte into page-cache pages was most of a segmented download's CPU, and one writer at a
    /// time doing it held back every other connection; on a VM whose host reclaims the guest's free
    /// memory that copy costs several times a memory copy (docs/BENCHMARKS.md, "16 connections, past the
    /// page cache"). For small files it was most of the file system's share of each file ("Small files:
    /// past the page cache"). The finished file is then not in the page cache: a program that reads it
    /// right away reads it from the disk. Set false to keep the file's pages cached (or to measure the
    /// difference).
    public var directWrites: Bool = true

    /// The former name of ``directWrites``, from when only segmented downloads wrote direct.
    @available(*, deprecated, renamed: "directWrites")
    public var directSegmentWrites: Bool {
        get { directWrites }
        set { directWrites = newValue }
    }
    /// Settings for the HTTP client when the download creates its own.
    public var client: DKHTTPClientConfiguration
    /// Where the download logs what an operator needs (see docs/ENGINE.md, "Logging and metrics"):
    /// start and resume offset, restarts and why, redirects, URL refreshes, retries with their delay,
    /// the fall-back to one connection, the end. Nil logs nothing. Never logs per byte.
    public var logger: Logger?

    /// Creates a configuration with the documented defaults.
    public init(
        maxRedirects: Int = 10, allowsInsecureRedirects: Bool = false, retries: Int = 5,
        retryBaseDelay: Duration = .milliseconds(500), maxRetryDelay: Duration = .seconds(30), lowSpeedLimit: Int = 1,
        lowSpeedTime: Duration = .seconds(30),
        checkpointInterval: Duration = .seconds(2), progressInterval: Duration = .milliseconds(250), rateLimit: Int? = nil,
        urlProvider: (@Sendable (URLRefreshContext) async -> String?)? = nil, maxURLRefreshes: Int = 3,
        preallocates: Bool = true, client: DKHTTPClientConfiguration = DKHTTPClientConfiguration()
    ) {
        self.maxRedirects = maxRedirects
        self.allowsInsecureRedirects = allowsInsecureRedirects
        self.retries = retries
        self.retryBaseDelay = retryBaseDelay
        self.maxRetryDelay = maxRetryDelay
        self.lowSpeedLimit = lowSpeedLimit
        self.lowSpeedTime = lowSpeedTime
        self.checkpointInterval = checkpointInterval
        self.progressInterval = progressInterval
        self.rateLimit = rateLimit
        self.urlProvider = urlProvider
        self.maxURLRefreshes = maxURLRefreshes
        self.preallocates = preallocates
        self.client = client
    }
}

/// A snapshot of a download's progress.
public struct DownloadProgress: Sendable, Hashable {
    /// Bytes of the file present (durable or about to be), including bytes from before a resume.
    public var bytesReceived: Int64
    /// The file's total length, when known.
    public var totalBytes: Int64?
    /// Bytes received by this run (not counting resumed bytes), for speed.
    public var bytesThisRun: Int64
    /// Bytes per second over the last few seconds.
    public var bytesPerSecond: Double
    /// Estimated time to completion, when the total and a speed are known.
    public var timeRemaining: Duration?
    /// Open connections for this download (1 for a single-connection download, 0 while waiting).
    public var activeConnections: Int

    /// `bytesReceived / totalBytes`, when the total is known.
    public var fraction: Double? {
        guard let totalBytes, totalBytes > 0 else { return totalBytes == 0 ? 1 : nil }
        return Double(bytesReceived) / Double(totalBytes)
    }

    public init(
        bytesReceived: Int64 = 0, totalBytes: Int64? = nil, bytesThisRun: Int64 = 0, bytesPerSecond: Double = 0,
        timeRemaining: Duration? = nil, activeConnections: Int = 0
    ) {
        self.bytesReceived = bytesReceived
        self.totalBytes = totalBytes
        self.bytesThisRun = bytesThisRun
        self.bytesPerSecond = bytesPerSecond
        self.timeRemaining = timeRemaining
        self.activeConnections = activeConnections
    }
}

/// Where a download is in its life.
public enum DownloadState: String, Sendable, Hashable {
    /// Created, not started.
    case waiting
    /// Connecting and sending the request.
    case connecting
    /// Receiving body bytes.
    case downloading
    /// Waiting before a retry after a transient failure.
    case retrying
    /// Verifying the checksum and moving the file into place.
    case verifying
    /// Stopped with its partial data kept; resumable.
    case paused
    /// The file is at its destination.
    case completed
    /// Stopped with an error; partial data kept when it can be resumed.
    case failed
    /// Stopped by the caller with its partial data removed.
    case cancelled
}

/// The reason attached to a state change.
public enum DownloadStateReason: Sendable, Hashable {
    /// A fresh start from byte 0.
    case started
    /// Continued from partial data at this offset.
    case resumed(offset: Int64)
    /// Partial data was discarded and the download started over.
    case restarted(RestartReason)
    /// A redirect was followed to this URL.
    case redirected(to: String)
    /// The URL was replaced (expired URL refreshed) with this one.
    case urlRefreshed(to: String)
    /// Waiting this long before retry number `attempt` after `error` (typed: its code, category and HTTP
    /// status are there for a caller to decide on; its `description` is the message).
    case retrying(after: Duration, attempt: Int, error: DownloadError)
    /// The server cannot resume (no range support); a pause will restart from zero.
    case notResumable
    /// Paused by the caller.
    case pausedByCaller
    /// Cancelled by the caller.
    case cancelledByCaller
    /// Every byte arrived; the file is being verified (checksum, length) and moved into place.
    case bodyComplete
    /// The file is in place.
    case finished
    /// The existing destination was kept (``ExistingFilePolicy``): nothing was downloaded.
    case keptExistingFile
    /// Stopped because the disk is full; resumable once space is freed.
    case diskFull
    /// Stopped by this error (the message names the cause).
    case error(String)
    /// Downloading over this many connections at once (segmented).
    case segmented(connections: Int)
    /// Several connections were asked for but the download stays on one, for this reason.
    case singleConnection(String)
    /// A source of a download with mirrors was dropped (its URL without password, and why); the
    /// download goes on with the others (docs/MIRRORS.md).
    case sourceDropped(source: String, reason: SourceDropReason)
}

/// An event from a running download.
public enum DownloadEvent: Sendable, Hashable {
    // The cases other than `progress` are boxed (`indirect`): an event is then a progress value or one
    // reference, copied without the runtime's value witnesses and metadata lookups. A progress event is
    // copied into every subscriber's queue from under a body chunk's write, the deepest point of a
    // transfer thread's stack.
    /// The state changed, with its reason.
    indirect case stateChanged(DownloadState, DownloadStateReason)
    /// A progress snapshot (rate-limited to ``DownloadConfiguration/progressInterval``).
    case progress(DownloadProgress)
    /// The download finished; the file is at `DownloadResult.path`.
    indirect case finished(DownloadResult)
    /// The download failed (or was paused/cancelled: see the error's code).
    indirect case failed(DownloadError)
}

/// The outcome of a finished download.
public struct DownloadResult: Sendable, Hashable {
    /// The final file.
    public var path: String
    /// Its length in bytes.
    public var bytes: Int64
    /// The offset the last run resumed from (0 for a fresh download).
    public var resumedFrom: Int64
    /// Bytes transferred over the network by this run.
    public var bytesTransferred: Int64
    /// The URL the bytes finally came from (after redirects and refreshes).
    public var finalURL: String
    /// The hex digest of the caller's checksum algorithm, when one was requested.
    public var checksumHex: String?
    /// Whether the server supports resuming (range requests with a validator or Accept-Ranges).
    public var isResumable: Bool
    /// The existing destination was kept (``ExistingFilePolicy``): nothing was downloaded.
    public var keptExistingFile: Bool = false
    /// The final response's `ETag` and `Last-Modified` (recorded on the file for ``ExistingFilePolicy/keepIfNotModified``).
    public var entityTag: String? = nil
    public var lastModified: String? = nil
    /// The status of the response the file's last bytes came from (200, 206, or 416 when the partial was
    /// already complete; for a segmented download, the range probe's); nil when nothing was requested.
    public var responseStatus: Int? = nil
    /// That response's header fields, in order (`Content-Type`, `Content-Disposition`, `Cache-Control`…).
    public var responseHeaders: DKHTTPHeaders? = nil
    /// With mirrors or piece checksums: what each source gave in this run, in the request's order
    /// (``DownloadRequest/url`` first); empty for a download from one source without piece checksums.
    public var sources: [SourceUsage] = []

    @_spi(DownloadKitInternal) public init(
        path: String, bytes: Int64, resumedFrom: Int64, bytesTransferred: Int64, finalURL: String, checksumHex: String?,
        isResumable: Bool, keptExistingFile: Bool = false, entityTag: String? = nil, lastModified: String? = nil,
        responseStatus: Int? = nil, responseHeaders: DKHTTPHeaders? = nil, sources: [SourceUsage] = []
    ) {
        self.path = path
        self.bytes = bytes
        self.resumedFrom = resumedFrom
        self.bytesTransferred = bytesTransferred
        self.finalURL = finalURL
        self.checksumHex = checksumHex
        self.isResumable = isResumable
        self.keptExistingFile = keptExistingFile
        self.entityTag = entityTag
        self.lastModified = lastModified
        self.responseStatus = responseStatus
        self.responseHeaders = responseHeaders
        self.sources = sources
    }
}
