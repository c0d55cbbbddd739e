import HTTPClient
import HTTPWire
import Testing

@_spi(DownloadKitInternal) @testable import DownloadKit
@testable import DownloadKitDecisions

/// What the executor needs to act comes in the machine's answer, never from its fields: how a body is
/// written (where it starts, the space to reserve, whether to hash it for Content-MD5, whether to gather
/// it) and what a segmented run starts from. Each row is one response head to a machine set up as it says.
@Suite("DownloadStateMachine actions")
struct DownloadStateMachineActionTests {
    typealias Tests = DownloadStateMachineTests

    struct Row: CustomTestStringConvertible, Sendable {
        var name: String
        var configure: @Sendable (inout DownloadConfiguration) -> Void = { _ in }
        /// Bytes of the partial, recorded with the strong ETag and a length of `recordedTotal`.
        var partial: Int64 = 0
        var recordedTotal: Int64 = 5000
        var status = 200
        var fields: [(String, String)]
        var expected: EngineMachine.BodyWrite
        var testDescription: String { name }
    }

    static func reserve(_ offset: Int64, _ length: Int64, preallocates: Bool = false) -> SpaceReservation {
        SpaceReservation(offset: offset, length: length, preallocates: preallocates)
    }

    static let md5Field = ("Content-MD5", "kAFQmDzST7DWlj99KOF/cg==")

    static let rows: [Row] = [
        Row(
            name: "a small body of known length: its space checked, not preallocated, too small to gather",
            fields: [("Content-Length", "5000"), ("ETag", Tests.strong)],
            expected: .init(restart: nil, offset: 0, reserve: reserve(0, 5000), hashesMD5: false, gather: nil)),
        Row(
            name: "a body of 64 KiB to 256 KiB is gathered whole",
            fields: [("Content-Length", "100000")],
            expected: .init(restart: nil, offset: 0, reserve: reserve(0, 100_000), hashesMD5: false, gather: 100_000)),
        Row(
            name: "a body of exactly 256 KiB from byte 0 is gathered; one byte more is not",
            fields: [("Content-Length", "\(256 << 10)")],
            expected: .init(restart: nil, offset: 0, reserve: reserve(0, 256 << 10), hashesMD5: false, gather: 256 << 10)),
        Row(
            name: "a body past the gather buffer is not gathered",
            fields: [("Content-Length", "\((256 << 10) + 1)")],
            expected: .init(restart: nil, offset: 0, reserve: reserve(0, (256 << 10) + 1), hashesMD5: false, gather: nil)),
        Row(
            name: "without direct writes nothing is gathered",
            configure: { $0.directWrites = false },
            fields: [("Content-Length", "100000")],
            expected: .init(restart: nil, offset: 0, reserve: reserve(0, 100_000), hashesMD5: false, gather: nil)),
        Row(
            name: "a large body is preallocated",
            fields: [("Content-Length", "\(2 << 20)")],
            expected: .init(restart: nil, offset: 0, reserve: reserve(0, 2 << 20, preallocates: true), hashesMD5: false, gather: nil)),
        Row(
            name: "a large body is only checked when the configuration does not preallocate",
            configure: { $0.preallocates = false },
            fields: [("Content-Length", "\(2 << 20)")],
            expected: .init(restart: nil, offset: 0, reserve: reserve(0, 2 << 20), hashesMD5: false, gather: nil)),
        Row(
            name: "a body of unknown length reserves nothing and is not gathered",
            fields: [("Transfer-Encoding", "chunked")],
            expected: .init(restart: nil, offset: 0, reserve: nil, hashesMD5: false, gather: nil)),
        Row(
            name: "an empty body reserves nothing",
            fields: [("Content-Length", "0")],
            expected: .init(restart: nil, offset: 0, reserve: nil, hashesMD5: false, gather: nil)),
        Row(
            name: "a stated Content-MD5 asks for the body's MD5",
            fields: [("Content-Length", "3"), md5Field],
            expected: .init(restart: nil, offset: 0, reserve: reserve(0, 3), hashesMD5: true, gather: nil)),
        Row(
            name: "a Content-MD5 that is no MD5 asks for nothing",
            fields: [("Content-Length", "3"), ("Content-MD5", "not base64")],
            expected: .init(restart: nil, offset: 0, reserve: reserve(0, 3), hashesMD5: false, gather: nil)),
        Row(
            name: "a resumed 206 is written at the partial's end, only the rest reserved",
            partial: 1000, status: 206, fields: Tests.fields206(1000, 4999, 5000),
            expected: .init(restart: nil, offset: 1000, reserve: reserve(1000, 4000), hashesMD5: false, gather: nil)),
        Row(
            name: "a resumed 206 that fits the gather buffer from its block is gathered",
            partial: 4096, recordedTotal: 4096 + 100_000, status: 206, fields: Tests.fields206(4096, 4095 + 100_000, 4096 + 100_000),
            expected: .init(restart: nil, offset: 4096, reserve: reserve(4096, 100_000), hashesMD5: false, gather: 100_000)),
        Row(
            name: "a resumed 206 whose block start pushes it past the gather buffer is not gathered",
            partial: 4097, recordedTotal: 4097 + (256 << 10), status: 206,
            fields: Tests.fields206(4097, 4096 + (256 << 10), 4097 + (256 << 10)),
            expected: .init(restart: nil, offset: 4097, reserve: reserve(4097, 256 << 10), hashesMD5: false, gather: nil)),
        Row(
            name: "a 200 with another ETag to a range request restarts: written from 0, all of it reserved",
            partial: 1000, fields: [("Content-Length", "6000"), ("ETag", "\"v2\"")],
            expected: .init(restart: .validatorChanged, offset: 0, reserve: reserve(0, 6000), hashesMD5: false, gather: nil)),
    ]

    @Test(arguments: rows)
    func bodyWrite(_ row: Row) throws {
        var configuration = DownloadConfiguration()
        row.configure(&configuration)
        var machine = try Tests.machine(configuration)
        if row.partial > 0 {
            let record = Tests.record(bytes: row.partial, total: row.recordedTotal)
            machine.adopt(MachineRecord(record))
            _ = machine.partialData(fileLength: row.partial, record: MachineRecord(record), sameBoot: true)
        }
        _ = machine.start()
        let head = ResponseHead(version: .http1_1, status: row.status, reason: "", headers: DKHTTPHeaders(row.fields))
        let plan = try #require(Tests.bodyWrite(machine.responseHead(head, wallClock: 0)))
        #expect(plan == row.expected)
    }

    /// Each transition the machine publishes is the library's transition of the same meaning (and so the
    /// same public state and reason).
    @Test func eachPublishedTransitionMapsToTheLibrarys() {
        let reset = DownloadError(.transport, "connection reset", isTransient: true)
        let rows: [(EngineMachine.Transition, DownloadTransition)] = [
            (.start, .start),
            (.resume(offset: 7), .resume(offset: 7)),
            (.restart(.lengthChanged), .restart(.lengthChanged)),
            (.redirect(to: "http://cdn.test/a"), .redirect(to: "http://cdn.test/a")),
            (.refreshURL(to: "http://cdn.test/b"), .refreshURL(to: "http://cdn.test/b")),
            (.stayOnOneConnection("the file is empty"), .stayOnOneConnection("the file is empty")),
            (.notResumable, .notResumable),
            (.receive(resumedFrom: 9), .receive(resumedFrom: 9)),
            (.retry(after: .seconds(2), attempt: 3, error: reset), .retry(after: .seconds(2), attempt: 3, error: reset)),
        ]
        for (published, expected) in rows {
            #expect(DownloadTransition(published) == expected, "\(published)")
        }
    }
}
