import Foundation
import GRDB
import TestOrigin
import Testing

@_spi(DownloadKitInternal) import DownloadKit
import DownloadKitManager
@testable import DownloadKitDaemon
import DownloadKitSession

/// The session protocol and the daemon's event log carry a task error's typed fields (issue #46), added
/// within protocol version 1: older frames and older logs still read.
@Suite("Session: typed task errors")
struct SessionTypedErrorTests {
    static let typed = ManagedTaskError(
        code: .httpStatus, category: .httpStatus, httpStatus: 410, isTransient: false,
        cause: ManagedTaskError.Cause(layer: .transport, code: "readTimeout", errorNumber: .timedOut, operation: "recv"),
        message: "Gone")

    static let wire = SessionTaskError(
        code: "httpStatus", category: "httpStatus", httpStatus: 410, transient: false,
        cause: SessionTaskError.Cause(layer: "transport", code: "readTimeout", errorNumber: .timedOut, operation: "recv"),
        message: "Gone")

    @Test func aTaskErrorCrossesTheProtocolFieldByField() throws {
        #expect(SessionService.wireError(Self.typed) == Self.wire)
        let event = SessionEvent(
            seq: 3, kind: .failed, task: "t", time: 1, errorCode: "httpStatus", errorDetail: "Gone", error: Self.wire)
        #expect(try SessionCodec.decodeServer(SessionCodec.encode(ServerMessage.event(event))) == .event(event))
        let info = SessionTaskInfo(
            id: "t", state: "failed", url: "http://x/", currentURL: "http://x/", path: nil, bytesReceived: 0,
            totalBytes: nil, priority: 0, group: nil, errorCode: "httpStatus", errorDetail: "Gone", error: Self.wire)
        let ok = ServerMessage.ok(id: 1, taskIDs: [], tasks: [info], position: SessionPosition(lastSequence: 0, acknowledged: 0))
        #expect(try SessionCodec.decodeServer(SessionCodec.encode(ok)) == ok)
    }

    /// A frame from a daemon older than the typed fields (code and detail only) decodes with no typed error.
    @Test func anOlderDaemonsFrameStillDecodes() throws {
        let frame = #"{"type":"event","event":{"seq":1,"kind":"failed","task":"t","time":1,"errorCode":"httpStatus","errorDetail":"x"}}"#
        guard case .event(let event) = try SessionCodec.decodeServer(Array(frame.utf8)) else {
            Issue.record("not an event")
            return
        }
        #expect(event.errorCode == "httpStatus" && event.error == nil)
    }

    /// The cause's error number is typed now; on the wire it is still `errno`, a number: a frame of the old
    /// build decodes, and the new build encodes the cause as the old one did.
    @Test func aCauseKeepsItsWireForm() throws {
        let old = #"{"code":"readTimeout","errno":110,"layer":"transport","operation":"recv"}"#
        let frame = #"{"type":"event","event":{"seq":1,"kind":"failed","task":"t","time":1,"errorCode":"httpStatus","#
            + #""errorDetail":"Gone","error":{"code":"httpStatus","category":"httpStatus","httpStatus":410,"#
            + #""transient":false,"cause":"# + old + #","message":"Gone"}}}"#
        guard case .event(let event) = try SessionCodec.decodeServer(Array(frame.utf8)) else {
            Issue.record("not an event")
            return
        }
        #expect(event.error == Self.wire)
        #expect(event.error?.cause?.errorNumber == .timedOut)
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        #expect(String(decoding: try encoder.encode(Self.wire.cause), as: UTF8.self) == old)
    }

    /// The event log keeps the typed error; a log created before its column opens, gains it, and reads
    /// its old rows with no typed error.
    @Test func theEventLogKeepsTheTypedErrorAndOpensAnOlderLog() throws {
        let scratch = try ScratchDirectory()
        let path = scratch.file("tasks.sqlite")
        let queue = try DatabaseQueue(path: path)
        // As the session's manager leaves the file: in WAL mode.
        try queue.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA journal_mode = WAL") }
        try queue.write { db in
            try db.execute(
                sql: """
                    CREATE TABLE session_meta (key TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL);
                    CREATE TABLE session_event (
                        seq INTEGER PRIMARY KEY NOT NULL, kind TEXT NOT NULL, task TEXT NOT NULL, time REAL NOT NULL,
                        url TEXT, path TEXT, bytes INTEGER, checksum TEXT, errorCode TEXT, errorDetail TEXT);
                    CREATE TABLE session_task (id TEXT PRIMARY KEY NOT NULL, lastKind TEXT NOT NULL);
                    INSERT INTO session_meta (key, value) VALUES ('schemaVersion', 1), ('lastSeq', 1), ('acknowledged', 0);
                    INSERT INTO session_event (seq, kind, task, time, errorCode, errorDetail)
                        VALUES (1, 'failed', 'old', 1, 'diskFull', 'full');
                    """)
        }
        try queue.close()
        let log = try EventLog(path: path)
        _ = try log.append([
            SessionEvent(seq: 0, kind: .failed, task: "new", time: 2, errorCode: "httpStatus", errorDetail: "Gone", error: Self.wire)
        ])
        let events = try log.events(after: 0, limit: 10).events
        #expect(events.map(\.task) == ["old", "new"])
        #expect(events.first?.errorCode == "diskFull" && events.first?.error == nil)
        #expect(events.last?.error == Self.wire)
    }
}
