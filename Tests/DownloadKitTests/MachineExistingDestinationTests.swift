import HTTPClient
import HTTPWire
import Testing

@testable import DownloadKit
@testable import DownloadKitDecisions

/// Issue #46: the two decisions made before the first request are the machine's, as tables of events and
/// the actions it answers — no file, no socket. What an existing destination means (``ExistingFilePolicy``:
/// the facts the executor found × the policy → keep, ask first with these conditions, or download, then
/// what the first request carries and what a `304` to it does), and what the executor does to the partial
/// it found (``EngineMachine/PartialPlan``: the bytes kept, a truncation, the prefix hashed for the
/// request's checksum, the durable offset), for each shape of partial.
@Suite struct MachineExistingDestinationTests {
    static let url = "http://origin.test/files/disk.iso"
    static let etag = "\"v1\""
    static let date = "Mon, 01 Jan 2024 00:00:00 GMT"
    /// The file's mtime, and the `If-Modified-Since` it makes when no `Last-Modified` was recorded.
    static let mtime: Int64 = 1_704_153_600
    static let mtimeDate = "Tue, 02 Jan 2024 00:00:00 GMT"

    /// A machine for `Self.url` into a file, with a SHA-256 checksum when `checksum` is set.
    static func machine(connections: Int = 1, checksum: Bool = false) throws -> EngineMachine {
        var configuration = DownloadConfiguration(retries: 5, retryBaseDelay: .zero)
        configuration.connections = connections
        var request = DownloadRequest(url: url, destination: .file("/downloads/disk.iso"))
        if checksum { request.checksum = Checksum(algorithm: .sha256, expectedHex: String(repeating: "0", count: 64)) }
        return EngineMachine(url: try HTTPURL(url), settings: .init(request, configuration, mirrors: []))
    }

    // MARK: - The existing destination

    /// The machine's answer, as a row writes it.
    enum Answer: Hashable, CustomStringConvertible {
        case download
        case keep
        case askFirst(ifNoneMatch: String?, ifModifiedSince: String?)

        init(_ action: EngineMachine.DestinationAction) {
            switch action {
            case .download: self = .download
            case .keep: self = .keep
            case .askFirst(let conditions): self = .conditions(of: conditions)
            }
        }

        /// The conditions among `headers`, as the action that asks with them.
        static func conditions(of headers: DKHTTPHeaders) -> Answer {
            .askFirst(
                ifNoneMatch: headers.first(name: "If-None-Match"), ifModifiedSince: headers.first(name: "If-Modified-Since"))
        }

        var description: String {
            switch self {
            case .download: "download"
            case .keep: "keep"
            case .askFirst(let tag, let since): "askFirst(If-None-Match: \(tag ?? "-"), If-Modified-Since: \(since ?? "-"))"
            }
        }
    }

    /// What the executor found at the destination.
    static func found(
        regular: Bool = true, partial: Bool = false, ours: Bool = true, etag: String? = etag, lastModified: String? = date
    ) -> ExistingFileRule.Found {
        ExistingFileRule.Found(
            facts: ExistingFileRule.Facts(isRegularFile: regular, partialExists: partial, ownedByUs: ours),
            entityTag: etag, lastModified: lastModified, modifiedSeconds: mtime, size: 4096)
    }

    struct DestinationRow: CustomTestStringConvertible, Sendable {
        var name: String
        var policy: ExistingFileRule.Policy
        /// What is there (nil: nothing, or not looked at).
        var found: ExistingFileRule.Found?
        var connections = 1
        var answer: Answer
        var testDescription: String { name }
    }

    static let askedWithRecordedValidators = Answer.askFirst(ifNoneMatch: etag, ifModifiedSince: date)

    static let destinationRows: [DestinationRow] = [
        DestinationRow(name: "replace: our file is downloaded again", policy: .replace, found: found(), answer: .download),
        DestinationRow(name: "replace: nothing there", policy: .replace, found: nil, answer: .download),
        DestinationRow(name: "no-clobber: nothing there is downloaded", policy: .keep, found: nil, answer: .download),
        DestinationRow(name: "no-clobber keeps our file", policy: .keep, found: found(), answer: .keep),
        DestinationRow(
            name: "no-clobber keeps another user's file (nothing is reported as downloaded)", policy: .keep,
            found: found(ours: false), answer: .keep),
        DestinationRow(
            name: "no-clobber: a destination that is no regular file is downloaded", policy: .keep,
            found: found(regular: false), answer: .download),
        DestinationRow(
            name: "no-clobber: partial data beside the file is resumed", policy: .keep, found: found(partial: true),
            answer: .download),
        DestinationRow(name: "if-modified: nothing there is downloaded", policy: .keepIfNotModified, found: nil, answer: .download),
        DestinationRow(
            name: "if-modified asks about our file with its recorded validators", policy: .keepIfNotModified,
            found: found(), answer: askedWithRecordedValidators),
        DestinationRow(
            name: "if-modified: a file without validators is asked about by its mtime", policy: .keepIfNotModified,
            found: found(etag: nil, lastModified: nil), answer: .askFirst(ifNoneMatch: nil, ifModifiedSince: mtimeDate)),
        DestinationRow(
            name: "if-modified: an ETag without Last-Modified goes with the mtime", policy: .keepIfNotModified,
            found: found(lastModified: nil), answer: .askFirst(ifNoneMatch: etag, ifModifiedSince: mtimeDate)),
        DestinationRow(
            name: "if-modified downloads another user's file again (no evidence of a download of ours)",
            policy: .keepIfNotModified, found: found(ours: false), answer: .download),
        DestinationRow(
            name: "if-modified: partial data beside the file is resumed", policy: .keepIfNotModified,
            found: found(partial: true), answer: .download),
        DestinationRow(
            name: "if-modified: a destination that is no regular file is downloaded", policy: .keepIfNotModified,
            found: found(regular: false), answer: .download),
        DestinationRow(
            name: "if-modified on several connections: the range probe asks first", policy: .keepIfNotModified,
            found: found(), connections: 4, answer: askedWithRecordedValidators),
    ]

    /// Each row: the answer to the facts; a kept file gets no request; otherwise the first request carries
    /// the conditions exactly when the machine asked first, and a `304` to it keeps the file only then (an
    /// unconditional request's `304` is no answer about a file it never named).
    @Test(arguments: destinationRows)
    func existingDestination(_ row: DestinationRow) throws {
        var machine = try Self.machine(connections: row.connections)
        let answer = Answer(machine.existingDestination(row.found, policy: row.policy))
        #expect(answer == row.answer)
        guard answer != .keep else { return }
        _ = machine.partialData(fileLength: 0, record: nil, sameBoot: true)
        guard case .send(let request, let restart) = machine.start().next else {
            Issue.record("no first request")
            return
        }
        #expect(restart == nil)
        #expect(request.headers.contains(name: "Range") == (row.connections > 1), "only the probe asks for a range")
        let asked = if case .askFirst = row.answer { true } else { false }
        let none = Answer.askFirst(ifNoneMatch: nil, ifModifiedSince: nil)
        #expect(Answer.conditions(of: request.headers) == (asked ? row.answer : none), "the first request's conditions")
        let notModified = ResponseHead(version: .http1_1, status: 304, reason: "", headers: DKHTTPHeaders())
        let head = machine.responseHead(notModified, wallClock: 1_700_000_000).next
        if asked {
            #expect(head == .discard)
            #expect(machine.exchangeEnded(jitter: 1).next == .keepExisting)
        } else {
            guard case .abandon = head else {
                Issue.record("a 304 to an unconditional request was taken: \(head)")
                return
            }
        }
    }

    /// A redirect keeps asking (the conditions are about the resource, wherever it is); the resource's own
    /// answer ends them, whatever it is: a `503` is retried without them.
    @Test func theConditionsLastUntilTheResourceAnswers() throws {
        var machine = try Self.machine()
        _ = machine.existingDestination(Self.found(), policy: .keepIfNotModified)
        _ = machine.partialData(fileLength: 0, record: nil, sameBoot: true)
        _ = machine.start()
        let redirect = ResponseHead(
            version: .http1_1, status: 302, reason: "", headers: DKHTTPHeaders([("Location", "http://cdn.test/disk.iso")]))
        #expect(machine.responseHead(redirect, wallClock: 0).next == .discard)
        guard case .send(let followed, _) = machine.exchangeEnded(jitter: 1).next else {
            Issue.record("no request after the redirect")
            return
        }
        #expect(Answer.conditions(of: followed.headers) == Self.askedWithRecordedValidators)
        let unavailable = ResponseHead(version: .http1_1, status: 503, reason: "", headers: DKHTTPHeaders())
        guard case .abandon(let failure) = machine.responseHead(unavailable, wallClock: 0).next else {
            Issue.record("a 503 was taken")
            return
        }
        guard case .retry = machine.failed(failure, stopRequested: false, jitter: 1).next,
            case .send(let again, _) = machine.retryDelayElapsed().next
        else {
            Issue.record("the 503 is not retried")
            return
        }
        #expect(Answer.conditions(of: again.headers) == .askFirst(ifNoneMatch: nil, ifModifiedSince: nil))
    }

    // MARK: - The partial's shape

    struct PartialRow: CustomTestStringConvertible, Sendable {
        var name: String
        var fileLength: Int64
        var record: MachineRecord?
        var sameBoot = true
        var checksum = true
        var plan: EngineMachine.PartialPlan
        var testDescription: String { name }
    }

    /// A record of `bytes` checkpointed of a 5000-byte resource with a strong ETag, on one connection
    /// unless `segments` are given.
    static func record(_ bytes: Int64, segments: [ResumeSegment] = []) -> MachineRecord {
        MachineRecord(
            originalURL: nil, entityTag: etag, lastModified: date, totalLength: 5000, acceptsRanges: true, fileName: nil,
            bytesReceived: bytes, segments: segments)
    }

    static let segments = [
        ResumeSegment(start: 0, end: 2500, written: 1000), ResumeSegment(start: 2500, end: nil, written: 500),
    ]

    static let partialRows: [PartialRow] = [
        PartialRow(
            name: "no partial: nothing kept, the checksum starts empty", fileLength: 0, record: nil,
            plan: .init(keep: 0, truncates: false, hashPrefix: 0, durableOffset: nil)),
        PartialRow(
            name: "no partial, no checksum: nothing to hash", fileLength: 0, record: nil, checksum: false,
            plan: .init(keep: 0, truncates: false, hashPrefix: nil, durableOffset: nil)),
        PartialRow(
            name: "bytes without a record: kept until the restart discards them, nothing known durable", fileLength: 1000,
            record: nil, plan: .init(keep: 1000, truncates: false, hashPrefix: 1000, durableOffset: nil)),
        PartialRow(
            name: "one connection, the file as the record says", fileLength: 1000, record: record(1000),
            plan: .init(keep: 1000, truncates: false, hashPrefix: 1000, durableOffset: 1000)),
        PartialRow(
            name: "one connection, same boot: the file's bytes past the checkpoint are real", fileLength: 1500,
            record: record(1000), plan: .init(keep: 1500, truncates: false, hashPrefix: 1500, durableOffset: 1000)),
        PartialRow(
            name: "one connection, other boot: cut back to the checkpoint", fileLength: 1500, record: record(1000),
            sameBoot: false, plan: .init(keep: 1000, truncates: true, hashPrefix: 1000, durableOffset: 1000)),
        PartialRow(
            name: "one connection, other boot, no checksum: cut back, nothing hashed", fileLength: 1500,
            record: record(1000), sameBoot: false, checksum: false,
            plan: .init(keep: 1000, truncates: true, hashPrefix: nil, durableOffset: 1000)),
        PartialRow(
            name: "one connection, a file shorter than the record: what it holds, durable as far as it goes",
            fileLength: 600, record: record(1000), sameBoot: false,
            plan: .init(keep: 600, truncates: false, hashPrefix: 600, durableOffset: 600)),
        PartialRow(
            name: "one connection, a file longer than the resource: emptied for the restart", fileLength: 6000,
            record: record(1000), plan: .init(keep: 0, truncates: true, hashPrefix: 0, durableOffset: 0)),
        PartialRow(
            name: "segmented: the file as it is, not hashed, durable as its map says", fileLength: 5000,
            record: record(0, segments: segments),
            plan: .init(keep: 5000, truncates: false, hashPrefix: nil, durableOffset: nil)),
        PartialRow(
            name: "segmented, other boot, a file shorter than the map: still not truncated", fileLength: 1800,
            record: record(0, segments: segments), sameBoot: false,
            plan: .init(keep: 1800, truncates: false, hashPrefix: nil, durableOffset: nil)),
    ]

    /// Each row: the record adopted as the executor does, then `partialData` answers what to do to the file.
    @Test(arguments: partialRows)
    func partialShape(_ row: PartialRow) throws {
        var machine = try Self.machine(checksum: row.checksum)
        if let record = row.record { machine.adopt(record) }
        let plan = machine.partialData(fileLength: row.fileLength, record: row.record, sameBoot: row.sameBoot)
        #expect(plan.keep == row.plan.keep, "bytes kept")
        #expect(plan.truncates == row.plan.truncates, "truncation")
        #expect(plan.hashPrefix == row.plan.hashPrefix, "prefix hashed")
        #expect(plan.durableOffset == row.plan.durableOffset, "durable offset")
    }
}
