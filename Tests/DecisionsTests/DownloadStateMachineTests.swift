import HTTPWire
import Testing

@testable import DownloadKitDecisions

/// The caller's error in the machine's tables, as DownloadKit's `DownloadError` is in the library: a failure
/// the machine decided keeps its ``MachineFailure`` and gets the code and transience that
/// `DownloadError.init(decided:)` gives it (DownloadKitTests' `DownloadStateMachineFailureTests` check that
/// mapping, message by message); a failure the machine is told of is a code, transient or not.
struct TestFailure: MachineError {
    /// The library's codes these tables name.
    enum Code: Hashable, Sendable {
        case contentRangeMismatch, tooSlow, contentMD5Mismatch, truncated, invalidPieceChecksums, pieceChecksumMismatch
        case checksumMismatch, httpStatus, invalidRedirect, insecureRedirect, tooManyRedirects, redirectLoop
        case protocolViolation, invalidURL, serverIgnoredRange, internalError, transport, diskFull, cancelled
    }

    var code: Code
    /// The failure the machine decided; nil for one it was told of.
    var decided: MachineFailure?
    var isTransient: Bool
    var isCancellation: Bool { code == .cancelled }

    /// A failure the machine is told of (a transport error, a full disk, a cancellation).
    init(_ code: Code, isTransient: Bool = false) {
        self.code = code
        self.isTransient = isTransient
    }

    init(decided failure: MachineFailure) {
        decided = failure
        isTransient = false
        switch failure {
        case .bodyPastRange, .rangeMismatch, .noBodyBytes: (code, isTransient) = (.contentRangeMismatch, true)
        case .tooSlow: (code, isTransient) = (.tooSlow, true)
        case .contentMD5Mismatch: code = .contentMD5Mismatch
        case .truncated: (code, isTransient) = (.truncated, true)
        case .pieceCount: code = .invalidPieceChecksums
        case .pieceMismatch: code = .pieceChecksumMismatch
        case .checksumMismatch: code = .checksumMismatch
        case .status(let status, _, _): (code, isTransient) = (.httpStatus, TransientStatus.statuses.contains(status))
        case .redirectWithoutLocation: code = .invalidRedirect
        case .unusableRedirect, .redirectToHTTP: code = .insecureRedirect
        case .tooManyRedirects: code = .tooManyRedirects
        case .redirectLoop: code = .redirectLoop
        case .tooManyBytes: code = .protocolViolation
        case .invalidProvidedURL: code = .invalidURL
        case .restartsExhausted: code = .serverIgnoredRange
        case .internalError: code = .internalError
        }
    }
}

/// Every resume rule of a download as a table of events and the actions the machine answers with — no
/// socket, no file, no clock (issue #12), and no DownloadKit: the machine is this module's, generic over the
/// caller's error (``TestFailure`` here). Each row starts a `DownloadStateMachine` from a partial file (its
/// length, its resume record, same boot or not), feeds it events and checks each answer; the end-to-end
/// tests (EngineTests, HostileServerTests, SegmentedTests…) run the same rules against real servers through
/// DownloadKit's `TransferEngine`. What needs DownloadKit's own types (the settings made from a request and
/// a configuration, the record read from `ResumeInfo`, the library's error messages and transitions, the
/// body-write plans with the library's gather rule) stays in DownloadKitTests.
@Suite("DownloadStateMachine")
struct DownloadStateMachineTests {
    typealias Machine = DownloadStateMachine<TestFailure>

    static let url = "http://origin.test/files/disk.iso"
    static let strong = "\"v1\""
    static let weak = "W/\"v1\""
    static let date = "Mon, 01 Jan 2024 00:00:00 GMT"

    /// The settings DownloadKit makes for a download into `destination` with `DownloadConfiguration()`'s
    /// defaults (`Settings.init(_:_:)`): 10 redirects, 5 retries from 0.5 s up to 30 s, 3 URL refreshes, the
    /// low-speed rule at 1 byte/s over 30 s, segments of at least 1 MiB, space preallocated, digest headers
    /// checked. No small-body rule: no answer of these tables depends on it (DownloadKitTests'
    /// `DownloadStateMachineActionTests` check the gathering with the library's rule).
    static func settings(_ destination: DownloadDestination = .file("/d")) -> Machine.Settings {
        var settings = Machine.Settings(destination: destination)
        settings.maxRedirects = 10
        settings.retries = 5
        settings.retryBaseDelay = 0.5
        settings.maxRetryDelay = 30
        settings.maxURLRefreshes = 3
        settings.lowSpeedLimit = 1
        settings.lowSpeedTime = 30
        settings.minimumSegmentSize = 1 << 20
        settings.preallocates = true
        settings.checksDigestHeader = true
        return settings
    }

    /// An answer of the machine, as a row writes it.
    enum Seen: Hashable, CustomStringConvertible {
        case send(url: String = DownloadStateMachineTests.url, range: String?, ifRange: String?, restart: RestartReason? = nil)
        case discard
        case write(restart: RestartReason? = nil)
        case abandon(TestFailure.Code)
        case runSegments(total: Int64)
        case askForURL(status: Int, bytes: Int64)
        /// A retry; `delay` nil means any delay.
        case retry(attempt: Int, delay: Double? = nil)
        case backOff
        case finalize
        case keepExisting
        case fail(TestFailure.Code)

        var description: String {
            switch self {
            case .send(let url, let range, let ifRange, let restart):
                "send(\(url), Range: \(range ?? "-"), If-Range: \(ifRange ?? "-"), restart: \(restart.map(\.rawValue) ?? "-"))"
            case .discard: "discard"
            case .write(let restart): "write(restart: \(restart.map(\.rawValue) ?? "-"))"
            case .abandon(let code): "abandon(\(code))"
            case .runSegments(let total): "runSegments(\(total))"
            case .askForURL(let status, let bytes): "askForURL(\(status), at \(bytes))"
            case .retry(let attempt, let delay): "retry(#\(attempt), after \(delay.map { "\($0)" } ?? "any"))"
            case .backOff: "backOff"
            case .finalize: "finalize"
            case .keepExisting: "keepExisting"
            case .fail(let code): "fail(\(code))"
            }
        }

        init(_ action: Machine.Action) {
            switch action {
            case .send(let request, let restart):
                self = .send(
                    url: request.url.absoluteString, range: request.headers.first(name: "Range"),
                    ifRange: request.headers.first(name: "If-Range"), restart: restart)
            case .runSegments(let run): self = .runSegments(total: run.total)
            case .askForURL(let context): self = .askForURL(status: context.status, bytes: context.bytesReceived)
            case .retry(let delay, let attempt, _): self = .retry(attempt: attempt, delay: delay)
            case .backOff: self = .backOff
            case .finalize: self = .finalize
            case .keepExisting: self = .keepExisting
            case .fail(let error): self = .fail(error.code)
            }
        }

        init(_ decision: Machine.Decision<Machine.Action>) { self.init(decision.next) }

        init(_ decision: Machine.Decision<Machine.HeadAction>) { self.init(decision.next) }

        init(_ action: Machine.HeadAction) {
            switch action {
            case .discard: self = .discard
            case .write(let plan): self = .write(restart: plan.restart)
            case .abandon(let error): self = .abandon(error.code)
            }
        }

        /// Whether `actual` is what this expectation describes (a retry's delay only when given).
        func matches(_ actual: Seen) -> Bool {
            if case .retry(let attempt, let delay) = self, case .retry(let actualAttempt, let actualDelay) = actual {
                return attempt == actualAttempt && (delay == nil || delay == actualDelay)
            }
            return self == actual
        }
    }

    /// What happens to the machine.
    enum Event: Sendable, CustomStringConvertible {
        case start
        case head(Int, [(String, String)])
        case written(Int)
        case ended
        case failure(TestFailure)
        case waited
        case url(String?)
        case segments(SegmentRunOutcome, map: [ResumeSegment] = [])

        var description: String {
            switch self {
            case .start: "start"
            case .head(let status, let fields): "head \(status) \(fields.map { "\($0.0): \($0.1)" }.joined(separator: ", "))"
            case .written(let count): "written \(count)"
            case .ended: "exchange ended"
            case .failure(let error): "failure \(error.code)"
            case .waited: "wait elapsed"
            case .url(let url): "URL provided: \(url ?? "nil")"
            case .segments(let outcome, _): "segments ended: \(outcome)"
            }
        }
    }

    /// The partial file found before the first request.
    struct Partial {
        var length: Int64 = 0
        var record: MachineRecord?
        var sameBoot = true
    }

    struct Case: CustomTestStringConvertible, Sendable {
        var name: String
        var configure: @Sendable (inout Machine.Settings) -> Void = { _ in }
        var partial: @Sendable () -> Partial = { Partial() }
        var steps: [(Event, Seen?)]
        /// The transitions published over the whole row, when the row checks them.
        var transitions: [Machine.Transition]?
        var testDescription: String { name }
    }

    /// The record of a partial of `Self.url`, as the machine reads it.
    static func record(
        bytes: Int64, etag: String? = strong, lastModified: String? = date, total: Int64? = 5000,
        segments: [ResumeSegment] = []
    ) -> MachineRecord {
        MachineRecord(
            originalURL: try! HTTPURL(url), entityTag: etag, lastModified: lastModified, totalLength: total,
            acceptsRanges: nil, fileName: nil, bytesReceived: bytes, segments: segments)
    }

    static func partial(_ length: Int64, _ record: MachineRecord?, sameBoot: Bool = true) -> @Sendable () -> Partial {
        { Partial(length: length, record: record, sameBoot: sameBoot) }
    }

    static func fields206(_ first: Int64, _ last: Int64, _ total: Int64, etag: String? = strong) -> [(String, String)] {
        var fields = [("Content-Range", "bytes \(first)-\(last)/\(total)"), ("Content-Length", "\(last - first + 1)")]
        if let etag { fields.append(("ETag", etag)) }
        fields.append(("Last-Modified", date))
        return fields
    }

    static let cases: [Case] = [
        Case(
            name: "a fresh download asks for the whole resource and finishes when it has every byte",
            steps: [
                (.start, .send(range: nil, ifRange: nil)),
                (.head(200, [("Content-Length", "5000"), ("ETag", strong), ("Accept-Ranges", "bytes")]), .write()),
                (.written(5000), nil),
                (.ended, .finalize),
            ],
            transitions: [.start, .receive(resumedFrom: 0)]),
        Case(
            name: "a repeated identical Content-Length is the length: more bytes than it are a protocol violation",
            steps: [
                (.start, .send(range: nil, ifRange: nil)),
                (.head(200, [("Content-Length", "5000, 5000"), ("ETag", strong)]), .write()),
                (.written(6000), nil),
                (.ended, .fail(.protocolViolation)),
            ]),
        Case(
            name: "a Content-Length beside Transfer-Encoding is no length: the chunked body is the resource",
            steps: [
                (.start, .send(range: nil, ifRange: nil)),
                (.head(200, [("Transfer-Encoding", "chunked"), ("Content-Length", "5000"), ("ETag", strong)]), .write()),
                (.written(6000), nil),
                (.ended, .finalize),
            ]),
        Case(
            name: "a partial proved by a strong ETag resumes with Range and If-Range: the ETag",
            partial: partial(1000, record(bytes: 1000)),
            steps: [
                (.start, .send(range: "bytes=1000-", ifRange: strong)),
                (.head(206, fields206(1000, 4999, 5000)), .write()),
                (.written(4000), nil),
                (.ended, .finalize),
            ],
            transitions: [.resume(offset: 1000), .receive(resumedFrom: 1000)]),
        Case(
            name: "a weak ETag never goes in If-Range: Last-Modified does",
            partial: partial(1000, record(bytes: 1000, etag: weak)),
            steps: [
                (.start, .send(range: "bytes=1000-", ifRange: date)),
                (.head(206, fields206(1000, 4999, 5000, etag: weak)), .write()),
            ]),
        Case(
            name: "a partial nothing can prove (weak ETag only) starts over instead of splicing",
            partial: partial(1000, record(bytes: 1000, etag: weak, lastModified: nil)),
            steps: [(.start, .send(range: nil, ifRange: nil, restart: .unusablePartialData))],
            transitions: [.resume(offset: 1000), .restart(.unusablePartialData)]),
        Case(
            name: "a partial without a resume record starts over",
            partial: partial(1000, nil),
            steps: [(.start, .send(range: nil, ifRange: nil, restart: .unusablePartialData))]),
        Case(
            name: "same boot: every byte of the file is trusted",
            partial: partial(3000, record(bytes: 1000)),
            steps: [(.start, .send(range: "bytes=3000-", ifRange: strong))]),
        Case(
            name: "after a reboot only the synced bytes of the record are trusted",
            partial: partial(3000, record(bytes: 1000), sameBoot: false),
            steps: [(.start, .send(range: "bytes=1000-", ifRange: strong))]),
        Case(
            name: "a partial longer than the recorded resource starts over",
            partial: partial(6000, record(bytes: 6000)),
            steps: [(.start, .send(range: nil, ifRange: nil, restart: .partialLongerThanResource))]),
        Case(
            name: "a 206 that starts elsewhere is refused and retried, the partial kept",
            partial: partial(1000, record(bytes: 1000)),
            steps: [
                (.start, .send(range: "bytes=1000-", ifRange: strong)),
                (.head(206, fields206(0, 4999, 5000)), .abandon(.contentRangeMismatch)),
                (.failure(TestFailure(.contentRangeMismatch, isTransient: true)), .retry(attempt: 1)),
                (.waited, .send(range: "bytes=1000-", ifRange: strong)),
            ]),
        Case(
            name: "a 200 to a range request with the same validator: the range was ignored, the body written from 0",
            partial: partial(1000, record(bytes: 1000)),
            steps: [
                (.start, .send(range: "bytes=1000-", ifRange: strong)),
                (.head(200, [("Content-Length", "5000"), ("ETag", strong)]), .write(restart: .rangeIgnored)),
                (.written(5000), nil),
                (.ended, .finalize),
            ],
            transitions: [.resume(offset: 1000), .restart(.rangeIgnored), .receive(resumedFrom: 0)]),
        Case(
            name: "a 200 to a range request with another ETag: the resource changed, the body written from 0",
            partial: partial(1000, record(bytes: 1000)),
            steps: [
                (.start, .send(range: "bytes=1000-", ifRange: strong)),
                (.head(200, [("Content-Length", "5000"), ("ETag", "\"v2\"")]), .write(restart: .validatorChanged)),
            ]),
        Case(
            name: "a 416 whose length is the partial's: already complete, nothing fetched",
            partial: partial(5000, record(bytes: 5000)),
            steps: [
                (.start, .send(range: "bytes=5000-", ifRange: strong)),
                (.head(416, [("Content-Range", "bytes */5000")]), .discard),
                (.ended, .finalize),
            ]),
        Case(
            name: "a 416 that names a longer resource contradicts itself: retried, the partial kept",
            partial: partial(1000, record(bytes: 1000)),
            steps: [
                (.start, .send(range: "bytes=1000-", ifRange: strong)),
                (.head(416, [("Content-Range", "bytes */5000")]), .abandon(.contentRangeMismatch)),
            ]),
        Case(
            name: "a 206 with another ETag: the validator changed, the partial discarded before the next request",
            partial: partial(1000, record(bytes: 1000)),
            steps: [
                (.start, .send(range: "bytes=1000-", ifRange: strong)),
                (.head(206, fields206(1000, 4999, 5000, etag: "\"v2\"")), .discard),
                (.ended, .send(range: nil, ifRange: nil, restart: .validatorChanged)),
            ]),
        Case(
            name: "a 206 with another length: the length changed, the partial discarded",
            partial: partial(1000, record(bytes: 1000)),
            steps: [
                (.start, .send(range: "bytes=1000-", ifRange: strong)),
                (.head(206, fields206(1000, 5999, 6000)), .discard),
                (.ended, .send(range: nil, ifRange: nil, restart: .lengthChanged)),
            ]),
        Case(
            name: "restarts are bounded: the first at once, later ones after a backoff, the sixth fails",
            configure: {
                $0.retries = 0
                $0.retryBaseDelay = 1
            },
            partial: partial(1000, record(bytes: 1000)),
            steps: [
                (.start, .send(range: "bytes=1000-", ifRange: strong)),
                (.head(206, fields206(1000, 4999, 5000, etag: "\"v2\"")), .discard),
                (.ended, .send(range: nil, ifRange: nil, restart: .validatorChanged)),
            ] + Array(
                repeating: [
                    (.head(200, [("Content-Length", "5000"), ("ETag", "\"v3\""), ("Accept-Ranges", "bytes")]), .write()),
                    (.written(100), nil),
                    (.ended, .send(range: "bytes=100-", ifRange: "\"v3\"")),
                    (.head(206, fields206(100, 4999, 5000, etag: "\"v4\"")), .discard),
                    (.ended, .backOff),
                    (.waited, .send(range: nil, ifRange: nil, restart: .validatorChanged)),
                ] as [(Event, Seen?)], count: 4
            ).flatMap { $0 } + [
                (.head(200, [("Content-Length", "5000"), ("ETag", "\"v3\""), ("Accept-Ranges", "bytes")]), .write()),
                (.written(100), nil),
                (.ended, .send(range: "bytes=100-", ifRange: "\"v3\"")),
                (.head(206, fields206(100, 4999, 5000, etag: "\"v4\"")), .discard),
                (.ended, .fail(.serverIgnoredRange)),
            ]),
        Case(
            name: "a server without range support or validators: written whole, marked not resumable",
            steps: [
                (.start, .send(range: nil, ifRange: nil)),
                (.head(200, [("Content-Length", "5000")]), .write()),
            ],
            transitions: [.start, .notResumable, .receive(resumedFrom: 0)]),
        Case(
            name: "an expired URL (403) asks the URL provider, then continues at the same offset",
            configure: { $0.hasURLProvider = true },
            partial: partial(1000, record(bytes: 1000)),
            steps: [
                (.start, .send(range: "bytes=1000-", ifRange: strong)),
                (.head(403, []), .discard),
                (.ended, .askForURL(status: 403, bytes: 1000)),
                (.url("http://cdn.test/disk.iso?sig=new"), .send(url: "http://cdn.test/disk.iso?sig=new", range: "bytes=1000-", ifRange: strong)),
            ],
            transitions: [.resume(offset: 1000), .refreshURL(to: "http://cdn.test/disk.iso?sig=new")]),
        Case(
            name: "a URL provider without a fresh URL ends the download with the status",
            configure: { $0.hasURLProvider = true },
            steps: [
                (.start, .send(range: nil, ifRange: nil)),
                (.head(410, []), .discard),
                (.ended, .askForURL(status: 410, bytes: 0)),
                (.url(nil), .fail(.httpStatus)),
            ]),
        Case(
            name: "URL refreshes are bounded by maxURLRefreshes",
            configure: {
                $0.hasURLProvider = true
                $0.maxURLRefreshes = 1
            },
            steps: [
                (.start, .send(range: nil, ifRange: nil)),
                (.head(403, []), .discard),
                (.ended, .askForURL(status: 403, bytes: 0)),
                (.url("http://cdn.test/a"), .send(url: "http://cdn.test/a", range: nil, ifRange: nil)),
                (.head(403, []), .discard),
                (.ended, .fail(.httpStatus)),
            ]),
        Case(
            name: "without a URL provider a 404 is a plain failure",
            steps: [
                (.start, .send(range: nil, ifRange: nil)),
                (.head(404, []), .abandon(.httpStatus)),
                (.failure(TestFailure(decided: .status(404, reason: "", url: try! HTTPURL(url)))), .fail(.httpStatus)),
            ]),
        Case(
            name: "disk full is not retried: the download stops resumably",
            partial: partial(1000, record(bytes: 1000)),
            steps: [
                (.start, .send(range: "bytes=1000-", ifRange: strong)),
                (.head(206, fields206(1000, 4999, 5000)), .write()),
                (.written(500), nil),
                (.failure(TestFailure(.diskFull)), .fail(.diskFull)),
            ]),
        Case(
            name: "a 503 with Retry-After waits exactly that long",
            configure: { $0.retryBaseDelay = 1 },
            steps: [
                (.start, .send(range: nil, ifRange: nil)),
                (.head(503, [("Retry-After", "7")]), .abandon(.httpStatus)),
                (.failure(TestFailure(decided: .status(503, reason: "", url: try! HTTPURL(url)))), .retry(attempt: 1, delay: 7)),
                (.waited, .send(range: nil, ifRange: nil)),
            ]),
        Case(
            name: "transient failures without progress are retried `retries` times, then the download fails",
            configure: { $0.retries = 2 },
            steps: [
                (.start, .send(range: nil, ifRange: nil)),
                (.failure(TestFailure(.transport, isTransient: true)), .retry(attempt: 1)),
                (.waited, .send(range: nil, ifRange: nil)),
                (.failure(TestFailure(.transport, isTransient: true)), .retry(attempt: 2)),
                (.waited, .send(range: nil, ifRange: nil)),
                (.failure(TestFailure(.transport, isTransient: true)), .fail(.transport)),
            ]),
        Case(
            name: "a short body asks for the rest, validated by what the first response named",
            steps: [
                (.start, .send(range: nil, ifRange: nil)),
                (.head(200, [("Content-Length", "5000"), ("ETag", strong), ("Accept-Ranges", "bytes")]), .write()),
                (.written(2000), nil),
                (.ended, .send(range: "bytes=2000-", ifRange: strong)),
            ]),
        Case(
            name: "an empty 206 is a failure with backoff, not an instant new request",
            partial: partial(1000, record(bytes: 1000)),
            steps: [
                (.start, .send(range: "bytes=1000-", ifRange: strong)),
                (.head(206, [("Content-Range", "bytes 1000-4999/5000"), ("ETag", strong)]), .write()),
                (.ended, .retry(attempt: 1)),
            ]),
        Case(
            name: "more bytes than the resource holds is a protocol violation",
            steps: [
                (.start, .send(range: nil, ifRange: nil)),
                (.head(200, [("Content-Length", "5000"), ("ETag", strong)]), .write()),
                (.written(6000), nil),
                (.ended, .fail(.protocolViolation)),
            ]),
        Case(
            name: "redirects are followed from the new URL; a loop ends in an error",
            steps: [
                (.start, .send(range: nil, ifRange: nil)),
                (.head(302, [("Location", "/mirror/disk.iso")]), .discard),
                (.ended, .send(url: "http://origin.test/mirror/disk.iso", range: nil, ifRange: nil)),
                (.head(301, [("Location", url)]), .discard),
                (.ended, .fail(.redirectLoop)),
            ]),
        Case(
            name: "more redirects than maxRedirects end in an error",
            configure: { $0.maxRedirects = 1 },
            steps: [
                (.start, .send(range: nil, ifRange: nil)),
                (.head(302, [("Location", "/a")]), .discard),
                (.ended, .send(url: "http://origin.test/a", range: nil, ifRange: nil)),
                (.head(302, [("Location", "/b")]), .discard),
                (.ended, .fail(.tooManyRedirects)),
            ]),
        Case(
            name: "a redirect without Location is refused",
            steps: [
                (.start, .send(range: nil, ifRange: nil)),
                (.head(302, []), .abandon(.invalidRedirect)),
            ]),
        Case(
            name: "segmented: a probe learns the length, then segment workers run",
            configure: { $0.connections = 4 },
            steps: [
                (.start, .send(range: "bytes=0-0", ifRange: nil)),
                (.head(206, fields206(0, 0, 64 << 20)), .discard),
                (.ended, .runSegments(total: 64 << 20)),
                (.segments(.complete), .finalize),
            ]),
        Case(
            name: "segmented: a file too small to split stays on one connection",
            configure: { $0.connections = 4 },
            steps: [
                (.start, .send(range: "bytes=0-0", ifRange: nil)),
                (.head(206, fields206(0, 0, 5000)), .discard),
                (.ended, .send(range: nil, ifRange: nil)),
            ],
            transitions: [.start, .stayOnOneConnection("the file is too small to split")]),
        Case(
            name: "segmented: a weak ETag without Last-Modified cannot protect ranges: one connection",
            configure: { $0.connections = 4 },
            steps: [
                (.start, .send(range: "bytes=0-0", ifRange: nil)),
                (.head(206, [("Content-Range", "bytes 0-0/67108864"), ("Content-Length", "1"), ("ETag", weak)]), .discard),
                (.ended, .send(range: nil, ifRange: nil)),
            ]),
        Case(
            name: "segmented: a server that ignores the probe's range writes the whole body on one connection",
            configure: { $0.connections = 4 },
            steps: [
                (.start, .send(range: "bytes=0-0", ifRange: nil)),
                (.head(200, [("Content-Length", "5000")]), .write()),
            ]),
        Case(
            name: "segmented: a resource that changed during the workers starts over with a new probe",
            configure: {
                $0.connections = 4
                $0.retryBaseDelay = 1
            },
            steps: [
                (.start, .send(range: "bytes=0-0", ifRange: nil)),
                (.head(206, fields206(0, 0, 64 << 20)), .discard),
                (.ended, .runSegments(total: 64 << 20)),
                (.segments(.restart(.validatorChanged)), .send(range: "bytes=0-0", ifRange: nil, restart: .validatorChanged)),
                (.head(206, fields206(0, 0, 64 << 20, etag: "\"v2\"")), .discard),
                (.ended, .runSegments(total: 64 << 20)),
                (.segments(.restart(.validatorChanged)), .backOff),
                (.waited, .send(range: "bytes=0-0", ifRange: nil, restart: .validatorChanged)),
            ]),
        Case(
            name: "segmented: workers that meet an expired URL ask the provider",
            configure: {
                $0.connections = 4
                $0.hasURLProvider = true
            },
            steps: [
                (.start, .send(range: "bytes=0-0", ifRange: nil)),
                (.head(206, fields206(0, 0, 64 << 20)), .discard),
                (.ended, .runSegments(total: 64 << 20)),
                (.segments(.refreshURL(status: 403)), .askForURL(status: 403, bytes: 0)),
                (.url("http://cdn.test/b"), .send(url: "http://cdn.test/b", range: "bytes=0-0", ifRange: nil)),
            ]),
        Case(
            name: "segmented: a saved map resumes with a probe carrying If-Range",
            configure: { $0.connections = 4 },
            partial: partial(
                64 << 20,
                record(
                    bytes: 0, total: 64 << 20,
                    segments: [ResumeSegment(start: 0, end: 32 << 20, written: 1 << 20), ResumeSegment(start: 32 << 20, end: nil, written: 0)])),
            steps: [
                (.start, .send(range: "bytes=0-0", ifRange: strong)),
                (.head(206, fields206(0, 0, 64 << 20)), .discard),
                (.ended, .runSegments(total: 64 << 20)),
            ]),
    ]

    @Test(arguments: cases)
    func row(_ row: Case) throws {
        var settings = Self.settings(.file("/downloads/disk.iso"))
        settings.retryBaseDelay = 0
        row.configure(&settings)
        var machine = Machine(url: try HTTPURL(Self.url), settings: settings)
        let partial = row.partial()
        if let record = partial.record { machine.adopt(record) }
        _ = machine.partialData(fileLength: partial.length, record: partial.record, sameBoot: partial.sameBoot)
        var transitions: [Machine.Transition] = []
        /// The answer's action as a row writes it; its transitions join the ones seen so far.
        func take(_ decision: Machine.Decision<Machine.Action>) -> Seen {
            transitions += decision.transitions
            return Seen(decision.next)
        }
        for (index, (event, expected)) in row.steps.enumerated() {
            let seen: Seen?
            switch event {
            case .start: seen = take(machine.start())
            case .head(let status, let fields):
                let head = ResponseHead(version: .http1_1, status: status, reason: "", headers: DKHTTPHeaders(fields))
                let decision = machine.responseHead(head, suggestedFileName: nil, wallClock: 1_700_000_000)
                transitions += decision.transitions
                seen = Seen(decision.next)
                if case .receivingBody = machine.state {
                    transitions += machine.bodyStarts().compactMap(\.transition)
                }
            case .written(let count):
                machine.bodyWritten(count)
                seen = nil
            case .ended: seen = take(machine.exchangeEnded(jitter: 1))
            case .failure(let error): seen = take(machine.failed(error, stopRequested: false, jitter: 1))
            case .waited: seen = take(machine.retryDelayElapsed())
            case .url(let url): seen = take(machine.urlProvided(url, jitter: 1))
            case .segments(let outcome, let map): seen = take(machine.segmentsEnded(outcome, map: map, jitter: 1))
            }
            if let expected {
                let actual = try #require(seen, "step \(index) (\(event)) gave no answer")
                #expect(expected.matches(actual), "step \(index) (\(event)): expected \(expected), got \(actual)")
            }
        }
        if let expectedTransitions = row.transitions {
            #expect(transitions == expectedTransitions)
        }
    }

    @Test func aStopRequestIsNeverRetried() throws {
        var machine = try Self.machine()
        _ = machine.start()
        let action = machine.failed(TestFailure(.transport, isTransient: true), stopRequested: true, jitter: 1)
        #expect(Seen(action) == .fail(.transport))
    }

    /// The machine reads a cancellation through the protocol: never retried, even when transient.
    @Test func aCancellationIsNeverRetried() throws {
        var machine = try Self.machine()
        _ = machine.start()
        let cancelled = TestFailure(.cancelled, isTransient: true)
        #expect(Seen(machine.failed(cancelled, stopRequested: false, jitter: 1)) == .fail(.cancelled))
    }

    @Test func credentialsNeverFollowARedirectToAnotherOrigin() throws {
        var settings = Self.settings()
        settings.headers = DKHTTPHeaders([("Authorization", "Bearer t"), ("X-Api-Key", "k"), ("Accept", "*/*")])
        settings.credentialHeaderNames = ["x-api-key"]
        var machine = Machine(url: try HTTPURL(Self.url), settings: settings)
        _ = machine.start()
        let head = ResponseHead(
            version: .http1_1, status: 302, reason: "", headers: DKHTTPHeaders([("Location", "http://cdn.test/disk.iso")]))
        #expect(machine.responseHead(head, suggestedFileName: nil, wallClock: 0).next == .discard)
        guard case .send(let next, _) = machine.exchangeEnded(jitter: 1).next else {
            Issue.record("no request after the redirect")
            return
        }
        #expect(next.url.absoluteString == "http://cdn.test/disk.iso")
        #expect(next.headers.first(name: "Authorization") == nil)
        #expect(next.headers.first(name: "X-Api-Key") == nil)
        #expect(next.headers.first(name: "Accept") == "*/*")
    }

    @Test func anHTTPSDownloadNeverFollowsARedirectToHTTP() throws {
        var machine = Machine(url: try HTTPURL("https://origin.test/disk.iso"), settings: Self.settings())
        _ = machine.start()
        let head = ResponseHead(
            version: .http1_1, status: 301, reason: "", headers: DKHTTPHeaders([("Location", "http://origin.test/disk.iso")]))
        #expect(Seen(machine.responseHead(head, suggestedFileName: nil, wallClock: 0)) == .abandon(.insecureRedirect))
    }

    /// A directory download named from the response takes the name handed in with the head it accepts
    /// (sanitised by the executor, DownloadKit's `FileNaming.suggestedFileName(for:at:)`), not a redirect's;
    /// without one, the settings' rule name; a file destination and a rule-named download never take it.
    @Test func aSuggestedNameIsTakenFromTheAcceptedHead() throws {
        let rows: [(destination: DownloadDestination, suggested: String?, expected: String?)] = [
            (.directory("/d", naming: .fromResponse), "report.pdf", "report.pdf"),
            (.directory("/d", naming: .fromResponse), nil, "rule.bin"),
            (.directory("/d", naming: .md5OfURL), "report.pdf", "rule.bin"),
            (.directory("/d", naming: .fileID("lesson-7")), "report.pdf", "rule.bin"),
            (.file("/d/x"), "report.pdf", nil),
        ]
        for row in rows {
            var settings = Self.settings(row.destination)
            settings.ruleFileName = "rule.bin"
            var machine = Machine(url: try HTTPURL(Self.url), settings: settings)
            _ = machine.start()
            let redirect = ResponseHead(
                version: .http1_1, status: 302, reason: "", headers: DKHTTPHeaders([("Location", "http://origin.test/named")]))
            #expect(machine.responseHead(redirect, suggestedFileName: "redirect.html", wallClock: 0).next == .discard)
            #expect(machine.resource.fileName == nil)
            _ = machine.exchangeEnded(jitter: 1)
            let ok = ResponseHead(version: .http1_1, status: 200, reason: "", headers: DKHTTPHeaders([("Content-Length", "10")]))
            #expect(Seen(machine.responseHead(ok, suggestedFileName: row.suggested, wallClock: 0)) == .write(restart: nil))
            #expect(machine.resource.fileName == row.expected, "\(row)")
        }
    }

    /// A machine for a download of `Self.url` into `/d`.
    static func machine(_ settings: Machine.Settings = settings()) throws -> Machine {
        Machine(url: try HTTPURL(Self.url), settings: settings)
    }

    /// A machine resuming `Self.url` from 1000 of 5000 bytes, its 206 for bytes 1000-4999 accepted.
    static func resumedAt1000() throws -> Machine {
        var machine = try Self.machine()
        let record = Self.record(bytes: 1000)
        machine.adopt(record)
        _ = machine.partialData(fileLength: 1000, record: record, sameBoot: true)
        _ = machine.start()
        let head = ResponseHead(version: .http1_1, status: 206, reason: "", headers: DKHTTPHeaders(Self.fields206(1000, 4999, 5000)))
        #expect(Seen(machine.responseHead(head, suggestedFileName: nil, wallClock: 0)) == .write(restart: nil))
        _ = machine.bodyStarts()
        return machine
    }

    /// The machine, not the executor, decides that a 206 body runs past its Content-Range: what is
    /// received but not yet written counts.
    @Test func a206BodyPastItsRangeIsRefusedByTheMachine() throws {
        var machine = try Self.resumedAt1000()
        // (bytes written before, bytes arriving, the failure's code or nil: go on)
        let rows: [(written: Int, arriving: Int64, fails: TestFailure.Code?)] = [
            (0, 4000, nil), (0, 4001, .contentRangeMismatch), (3000, 1000, nil), (0, 1001, .contentRangeMismatch),
        ]
        for row in rows {
            machine.bodyWritten(row.written)
            let verdict = machine.bodyArriving(row.arriving)
            #expect(Self.code(verdict) == row.fails, "\(row)")
            if case .fail(let failure) = verdict {
                #expect(failure.decided == .bodyPastRange(lastByte: 4999))
                #expect(failure.isTransient)
            }
        }
    }

    /// The failure's code of a verdict, nil when it goes on.
    static func code(_ verdict: Machine.Verdict) -> TestFailure.Code? {
        if case .fail(let failure) = verdict { failure.code } else { nil }
    }

    /// The failure the machine decided in a verdict, nil when it goes on.
    static func decided(_ verdict: Machine.Verdict) -> MachineFailure? {
        if case .fail(let failure) = verdict { failure.decided } else { nil }
    }

    /// How an answer to a head says to write the body; nil when it says not to.
    static func bodyWrite(_ decision: Machine.Decision<Machine.HeadAction>) -> Machine.BodyWrite? {
        if case .write(let plan) = decision.next { plan } else { nil }
    }

    /// The length verdict before the rename: fewer bytes than the resource is a transient truncation.
    @Test func aShortFileIsTruncatedByTheMachinesVerdict() throws {
        var machine = try Self.resumedAt1000()
        machine.bodyWritten(3999)
        #expect(machine.verifying() == .fail(TestFailure(decided: .truncated(expected: 5000, received: 4999))))
        guard case .fail(let failure) = machine.verifying() else { return }
        #expect(failure.isTransient)
        machine.bodyWritten(1)
        #expect(machine.verifying() == .check(pieces: nil, checksum: nil))
    }

    /// The stop rule asked with what the machine knows of the partial: a resumed partial is kept on a
    /// failure, removed on a wrong checksum.
    @Test func theStopDisposalComesFromWhatThePartialHolds() throws {
        var machine = try Self.resumedAt1000()
        #expect(machine.stopped(.failure(.other), holdsLock: true, hasWorkingFile: true) == .keep)
        #expect(machine.stopped(.failure(.fileWrong), holdsLock: true, hasWorkingFile: true) == .remove)
        #expect(machine.stopped(.failure(.pieceWrong), holdsLock: true, hasWorkingFile: true) == .remove)
        #expect(machine.stopped(.cancel, holdsLock: false, hasWorkingFile: true) == .leave)
        var fresh = try Self.machine()
        #expect(fresh.stopped(.failure(.other), holdsLock: true, hasWorkingFile: true) == .remove)
    }

    /// The low-speed rule is an event of the machine: bytes and the time they arrived in, a transient
    /// `tooSlow` failure out when a window closed below the limit; off with a limit of 0.
    @Test func theLowSpeedRuleIsAnEventOfTheMachine() throws {
        let rows: [(limit: Int, steps: [(bytes: Int, now: Double, tooSlow: Bool)])] = [
            (1000, [(500, 1, false), (4000, 6, false), (4000, 11, true)]),
            (1000, [(500, 1, false), (12_000, 11, false), (9000, 21, true)]),
            (0, [(0, 1, false), (0, 100, false)]),
        ]
        for row in rows {
            var settings = Self.settings()
            settings.lowSpeedLimit = row.limit
            settings.lowSpeedTime = 10
            var machine = try Self.machine(settings)
            for (index, step) in row.steps.enumerated() {
                let verdict = machine.received(step.bytes, now: step.now)
                #expect(Self.code(verdict) == (step.tooSlow ? .tooSlow : nil), "limit \(row.limit), step \(index)")
                if case .fail(let failure) = verdict { #expect(failure.isTransient) }
            }
        }
    }

    /// Transitions, the record's changes and what the server said of resuming travel with the answer
    /// they belong to, in order: the executor performs them before the action and reads no flag beside it.
    @Test func effectsTravelWithTheirAnswer() throws {
        var machine = try Self.machine()
        let start = machine.start()
        #expect(start.effects == [.recordChanged, .publish(.start)])
        let redirect = ResponseHead(
            version: .http1_1, status: 302, reason: "", headers: DKHTTPHeaders([("Location", "http://cdn.test/disk.iso")]))
        #expect(machine.responseHead(redirect, suggestedFileName: nil, wallClock: 0) == .init(effects: [], next: .discard))
        let followed = machine.exchangeEnded(jitter: 1)
        #expect(followed.effects == [.recordChanged, .publish(.redirect(to: "http://cdn.test/disk.iso"))])
        // A 200 with no validator and no Accept-Ranges: not resumable, said once, with the record's change.
        let whole = ResponseHead(version: .http1_1, status: 200, reason: "", headers: DKHTTPHeaders([("Content-Length", "3")]))
        let head = machine.responseHead(whole, suggestedFileName: nil, wallClock: 0)
        #expect(Seen(head) == .write(restart: nil))
        #expect(head.effects == [.recordChanged, .resumable(false), .publish(.notResumable)])
        #expect(machine.bodyStarts() == [.publish(.receive(resumedFrom: 0))])
        machine.bodyWritten(3)
        // Nothing new to record at the end: the answer carries no effect.
        #expect(machine.exchangeEnded(jitter: 1) == .init(effects: [], next: .finalize))
    }

    /// A resumed 206 says the resource is resumable and records its validators; a retry's wait is published
    /// with the retry it announces, and the request after it resumes.
    @Test func aRetryIsPublishedWithItsAction() throws {
        var machine = try Self.resumedAt1000()
        machine.bodyWritten(10)
        let reset = TestFailure(.transport, isTransient: true)
        let retry = machine.failed(reset, stopRequested: false, jitter: 1)
        #expect(Seen.retry(attempt: 1).matches(Seen(retry)))
        guard case .retry(let delay, let attempt, _) = retry.next else {
            Issue.record("no retry")
            return
        }
        #expect(retry.effects == [.publish(.retry(after: .seconds(delay), attempt: attempt, error: reset))])
        let resumed = machine.retryDelayElapsed()
        #expect(resumed.effects == [.publish(.resume(offset: 1010))])
        let head = ResponseHead(version: .http1_1, status: 206, reason: "", headers: DKHTTPHeaders(Self.fields206(1010, 4999, 5000)))
        let accepted = machine.responseHead(head, suggestedFileName: nil, wallClock: 0)
        #expect(Seen(accepted) == .write(restart: nil))
        #expect(accepted.effects == [.resumable(true), .recordChanged])
    }

    /// The machine draws no random number: the backoff's jitter is an input of the event that decides the
    /// wait, so the same events give the same delays.
    @Test func theBackoffJitterIsAnInputOfTheEvent() throws {
        var settings = Self.settings()
        settings.retries = 3
        settings.retryBaseDelay = 1
        settings.maxRetryDelay = 30
        var machine = try Self.machine(settings)
        _ = machine.start()
        let reset = TestFailure(.transport, isTransient: true)
        #expect(Seen(machine.failed(reset, stopRequested: false, jitter: 0)) == .retry(attempt: 1, delay: 0.5))
        _ = machine.retryDelayElapsed()
        #expect(Seen(machine.failed(reset, stopRequested: false, jitter: 1)) == .retry(attempt: 2, delay: 2))
        _ = machine.retryDelayElapsed()
        #expect(Seen(machine.failed(reset, stopRequested: false, jitter: 0.5)) == .retry(attempt: 3, delay: 3))
    }

    /// The Content-MD5 verdict is the machine's: the executor reports the digest it computed over the body,
    /// the machine compares it with what the accepted response stated.
    @Test func theContentMD5VerdictIsTheMachines() throws {
        var machine = try Self.machine()
        _ = machine.start()
        // MD5("abc") = 900150983cd24fb0d6963f7d28e17f72, base64 kAFQmDzST7DWlj99KOF/cg==.
        let md5: [UInt8] = [0x90, 0x01, 0x50, 0x98, 0x3c, 0xd2, 0x4f, 0xb0, 0xd6, 0x96, 0x3f, 0x7d, 0x28, 0xe1, 0x7f, 0x72]
        let head = ResponseHead(
            version: .http1_1, status: 200, reason: "",
            headers: DKHTTPHeaders([("Content-Length", "3"), ("Content-MD5", "kAFQmDzST7DWlj99KOF/cg==")]))
        #expect(Self.bodyWrite(machine.responseHead(head, suggestedFileName: nil, wallClock: 0))?.hashesMD5 == true)
        #expect(machine.bodyDigested(md5) == .goOn)
        var wrong = md5
        wrong[0] ^= 1
        #expect(Self.decided(machine.bodyDigested(wrong)) == .contentMD5Mismatch(stated: md5))
        #expect(Self.code(machine.bodyDigested(wrong)) == .contentMD5Mismatch)

        var plain = try Self.machine()
        _ = plain.start()
        let unstated = ResponseHead(version: .http1_1, status: 200, reason: "", headers: DKHTTPHeaders([("Content-Length", "3")]))
        #expect(Self.bodyWrite(plain.responseHead(unstated, suggestedFileName: nil, wallClock: 0))?.hashesMD5 == false)
        #expect(plain.bodyDigested(wrong) == .goOn)
    }

    /// The whole file's checksum verdict is the machine's: the caller's checksum first, else the digest
    /// header of the accepted 200 (RFC 6249) when the configuration checks it; the executor reports the
    /// digest it computed.
    @Test func theChecksumVerdictIsTheMachines() throws {
        let sha256Empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        let other = String(repeating: "0", count: 64)
        let head = ResponseHead(
            version: .http1_1, status: 200, reason: "",
            headers: DKHTTPHeaders([("Content-Length", "0"), ("Digest", "SHA-256=47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=")]))
        func answered(_ settings: Machine.Settings) throws -> Machine {
            var machine = try Self.machine(settings)
            _ = machine.start()
            #expect(Seen(machine.responseHead(head, suggestedFileName: nil, wallClock: 0)) == .write(restart: nil))
            return machine
        }

        var stated = try answered(Self.settings())
        #expect(stated.finalChecksum == .stated(Checksum(algorithm: .sha256, expectedHex: sha256Empty)))
        #expect(stated.fileDigested(sha256Empty) == .goOn)
        #expect(Self.code(stated.fileDigested(other)) == .checksumMismatch)
        #expect(
            Self.decided(stated.fileDigested(other))
                == .checksumMismatch(algorithm: "sha256", computed: other, expected: sha256Empty, statedByServer: true))

        var unchecked = Self.settings()
        unchecked.checksDigestHeader = false
        var off = try answered(unchecked)
        #expect(off.finalChecksum == nil)
        #expect(off.fileDigested(other) == .goOn)

        var requesting = Self.settings()
        requesting.checksum = Checksum(algorithm: .sha256, expectedHex: other)
        var requested = try answered(requesting)
        #expect(requested.finalChecksum == .requested(Checksum(algorithm: .sha256, expectedHex: other)))
        #expect(requested.fileDigested(other) == .goOn)
        #expect(
            Self.decided(requested.fileDigested(sha256Empty))
                == .checksumMismatch(algorithm: "sha256", computed: sha256Empty, expected: other, statedByServer: false))
    }

    /// Pieces on one connection are judged by the machine: ``DownloadStateMachine/verifying()`` asks for them
    /// (only without a segment map, only when the table describes the length),
    /// ``DownloadStateMachine/piecesDigested(_:)`` fails at the first bad piece, naming it. The digests are
    /// the executor's report, so any bytes do: the machine compares, it does not hash.
    @Test func piecesOnOneConnectionAreJudgedByTheMachine() throws {
        // 10 bytes in pieces of 4: 0-3, 4-7, 8-9.
        let digests = (0..<3).map { piece in [UInt8](repeating: UInt8(piece + 1), count: 32) }
        let table = PieceChecksums(algorithm: .sha256, pieceLength: 4, digests: digests)
        var settings = Self.settings()
        settings.pieceChecksums = table
        settings.checksDigestHeader = false
        var machine = try Self.machine(settings)
        _ = machine.start()
        // The probe's 200: no ranges, the whole body on one connection.
        let head = ResponseHead(version: .http1_1, status: 200, reason: "", headers: DKHTTPHeaders([("Content-Length", "10")]))
        #expect(Seen(machine.responseHead(head, suggestedFileName: nil, wallClock: 0)) == .write(restart: nil))
        _ = machine.bodyStarts()
        machine.bodyWritten(10)
        #expect(Seen(machine.exchangeEnded(jitter: 1)) == .finalize)
        #expect(machine.verifying() == .check(pieces: table, checksum: nil))
        var bad = digests
        bad[1][0] ^= 1
        let rows: [(digests: [[UInt8]], fails: MachineFailure?)] = [
            (digests, nil),
            (bad, .pieceMismatch(piece: 1, range: 4..<8, algorithm: "sha256")),
            (Array(digests.prefix(2)), .pieceMismatch(piece: 2, range: 8..<10, algorithm: "sha256")),
        ]
        for row in rows {
            let verdict = machine.piecesDigested(row.digests)
            #expect(Self.decided(verdict) == row.fails)
            if row.fails != nil { #expect(Self.code(verdict) == .pieceChecksumMismatch) }
        }
        // A table that does not describe the length the head states fails before a byte is written.
        var short = settings
        short.pieceChecksums = PieceChecksums(algorithm: .sha256, pieceLength: 4, digests: Array(digests.prefix(2)))
        var refused = try Self.machine(short)
        _ = refused.start()
        #expect(Seen(refused.responseHead(head, suggestedFileName: nil, wallClock: 0)) == .abandon(.invalidPieceChecksums))
        // Without a stated length it fails at the end, before any piece is hashed.
        let unframed = ResponseHead(version: .http1_1, status: 200, reason: "", headers: DKHTTPHeaders([("Connection", "close")]))
        var wrongTable = try Self.machine(short)
        _ = wrongTable.start()
        #expect(Seen(wrongTable.responseHead(unframed, suggestedFileName: nil, wallClock: 0)) == .write(restart: nil))
        wrongTable.bodyWritten(10)
        _ = wrongTable.exchangeEnded(jitter: 1)
        guard case .fail(let failure) = wrongTable.verifying(), failure.code == .invalidPieceChecksums else {
            Issue.record("a piece table for another length was not refused")
            return
        }
    }

    /// A segmented run starts from what the probe and the record taught: the whole length, the space not yet
    /// written, the saved map and its prefix, where requests go and the validators each range carries.
    @Test func aSegmentedRunCarriesWhatItStartsFrom() throws {
        var settings = Self.settings()
        settings.connections = 4
        let total: Int64 = 64 << 20
        let rows: [(saved: [ResumeSegment], prefix: Int64)] = [
            ([], 0),
            ([ResumeSegment(start: 0, end: 32 << 20, written: 8 << 20), ResumeSegment(start: 32 << 20, end: total, written: 1000)], 8 << 20),
        ]
        for row in rows {
            var machine = try Self.machine(settings)
            if !row.saved.isEmpty {
                let record = Self.record(bytes: row.prefix, total: total, segments: row.saved)
                machine.adopt(record)
                _ = machine.partialData(fileLength: total, record: record, sameBoot: true)
            }
            _ = machine.start()
            let probe = ResponseHead(version: .http1_1, status: 206, reason: "", headers: DKHTTPHeaders(Self.fields206(0, 0, total)))
            #expect(machine.responseHead(probe, suggestedFileName: nil, wallClock: 0).next == .discard)
            guard case .runSegments(let run) = machine.exchangeEnded(jitter: 1).next else {
                Issue.record("no segmented run after the probe (\(row.saved.count) saved segments)")
                continue
            }
            let expected = Machine.SegmentRun(
                total: total, reserve: SpaceReservation(offset: row.prefix, length: total - row.prefix, preallocates: true),
                saved: row.saved, prefix: row.prefix, url: try HTTPURL(Self.url), headers: DKHTTPHeaders(),
                ifRange: Self.strong, entityTag: try EntityTag(parsing: Self.strong), lastModified: Self.date, sources: [],
                linkedMirrors: 0)
            #expect(run == expected, "\(row.saved.count) saved segments")
        }
    }

    /// A segmented run's sources are the machine's answer (docs/MIRRORS.md): where requests go now, then
    /// the request's mirrors — with the request's credential fields only when a mirror shares the original
    /// URL's origin — then the probe's `Link: rel=duplicate` targets, best first, at most `maxLinkMirrors`,
    /// none already known, never with credentials.
    struct SourceRow: CustomTestStringConvertible, Sendable {
        var name: String
        var mirrors: [String] = []
        var link: String?
        var maxLinkMirrors = 4
        /// Each source's URL and whether its requests carry the credential fields; empty: one source.
        var expected: [(url: String, credentials: Bool)]
        var linked = 0
        var testDescription: String { name }
    }

    static let sourceRows: [SourceRow] = [
        SourceRow(name: "no mirror and no Link header: one source", expected: []),
        SourceRow(
            name: "a mirror of the original URL's origin gets the credentials, another origin does not",
            mirrors: ["http://origin.test/mirror/disk.iso", "http://other.test/disk.iso"],
            expected: [(url, true), ("http://origin.test/mirror/disk.iso", true), ("http://other.test/disk.iso", false)]),
        SourceRow(
            name: "Link mirrors come last, best first, without credentials even from the same origin",
            mirrors: ["http://other.test/disk.iso"],
            link: "<http://b.test/disk.iso>; rel=duplicate; pri=2, <http://origin.test/linked.iso>; rel=duplicate; pri=1",
            expected: [
                (url, true), ("http://other.test/disk.iso", false), ("http://origin.test/linked.iso", false),
                ("http://b.test/disk.iso", false),
            ],
            linked: 2),
        SourceRow(
            name: "Link mirrors are limited by maxLinkMirrors",
            link: "<http://a.test/x>; rel=duplicate; pri=1, <http://b.test/x>; rel=duplicate; pri=2, <http://c.test/x>; rel=duplicate; pri=3",
            maxLinkMirrors: 2,
            expected: [(url, true), ("http://a.test/x", false), ("http://b.test/x", false)], linked: 2),
        SourceRow(
            name: "with maxLinkMirrors 0 the Link header adds nothing",
            link: "<http://a.test/x>; rel=duplicate", maxLinkMirrors: 0, expected: []),
        SourceRow(
            name: "known URLs are not repeated: the first URL and the request's mirrors",
            mirrors: ["http://other.test/disk.iso"],
            link: "<\(url)>; rel=duplicate; pri=1, <http://other.test/disk.iso>; rel=duplicate; pri=2, <http://c.test/x>; rel=duplicate; pri=3",
            expected: [(url, true), ("http://other.test/disk.iso", false), ("http://c.test/x", false)], linked: 1),
    ]

    @Test(arguments: sourceRows)
    func aSegmentedRunsSources(_ row: SourceRow) throws {
        var settings = Self.settings()
        settings.headers = DKHTTPHeaders([("Authorization", "Bearer t"), ("X-Api-Key", "k"), ("Accept", "*/*")])
        settings.credentialHeaderNames = ["x-api-key"]
        settings.connections = 4
        settings.mirrors = try row.mirrors.map { try HTTPURL($0) }
        settings.maxLinkMirrors = row.maxLinkMirrors
        var machine = try Self.machine(settings)
        _ = machine.start()
        let fields = Self.fields206(0, 0, 64 << 20) + (row.link.map { [("Link", $0)] } ?? [])
        let probe = ResponseHead(version: .http1_1, status: 206, reason: "", headers: DKHTTPHeaders(fields))
        #expect(machine.responseHead(probe, suggestedFileName: nil, wallClock: 0).next == .discard)
        guard case .runSegments(let run) = machine.exchangeEnded(jitter: 1).next else {
            Issue.record("no segmented run after the probe")
            return
        }
        let seen = run.sources.map { ($0.url.absoluteString, $0.headers.first(name: "Authorization") != nil) }
        #expect(seen.map(\.0) == row.expected.map(\.url))
        #expect(seen.map(\.1) == row.expected.map(\.credentials))
        for source in run.sources {
            // The credential fields travel together; the other fields always.
            #expect((source.headers.first(name: "X-Api-Key") != nil) == (source.headers.first(name: "Authorization") != nil))
            #expect(source.headers.first(name: "Accept") == "*/*")
        }
        #expect(run.linkedMirrors == row.linked)
    }
}
