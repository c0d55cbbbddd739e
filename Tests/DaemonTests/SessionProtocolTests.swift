@testable import DownloadKit
@testable import DownloadKitManager
@testable import DownloadKitDaemon
import DownloadKitSession
import Foundation
import Testing

/// The wire protocol's framing and codec, and the event rules, as values.
@Suite struct SessionProtocolTests {
    @Test func framesSurviveAnySplitAndOversizedLengthsAreRefusedBeforeAllocation() {
        let bodies: [[UInt8]] = [Array("{\"type\":\"list\",\"id\":1}".utf8), [], Array(repeating: 0x41, count: 70_000)]
        let stream = bodies.flatMap(FrameEncoder.frame)
        for split in [1, 3, 4, 5, 4096, stream.count] {
            var decoder = FrameDecoder()
            var decoded: [[UInt8]] = []
            var offset = 0
            while offset < stream.count {
                decoder.append(stream[offset..<min(stream.count, offset + split)])
                offset += split
                while case .frame(let body) = decoder.next() { decoded.append(body) }
            }
            #expect(decoded == bodies, "split \(split)")
            #expect(decoder.bufferedBytes == 0)
        }
        var decoder = FrameDecoder(maxFrameBytes: 1 << 20)
        decoder.append([0x7F, 0xFF, 0xFF, 0xFF, 1, 2])
        #expect(decoder.next() == .tooLarge(declared: 0x7FFF_FFFF))
        var truncated = FrameDecoder()
        truncated.append(FrameEncoder.frame(Array("{}".utf8)).dropLast())
        #expect(truncated.next() == .needMore)
    }

    @Test func everyClientRequestRoundTrips() throws {
        let requests: [ClientRequest] = [
            .hello(version: 1, session: "a.b"),
            .enqueue([SessionTaskRequest(url: "http://127.0.0.1/x", file: "/tmp/x", checksum: "md5=" + String(repeating: "0", count: 32), headers: ["A": "b"], priority: 3, group: "g", connections: 2, rateLimit: 10)]),
            .pause(["t1"]), .resume(["t1", "t2"]), .cancel([]), .remove(["t"], deletingFiles: true), .list,
            .refreshURL(task: "t", url: "http://127.0.0.1/y"), .subscribe(after: 7), .acknowledge(upTo: 9),
        ]
        for (index, request) in requests.enumerated() {
            let message = ClientMessage(id: index, request)
            let decoded = try SessionCodec.decodeClient(SessionCodec.encode(message))
            if case .hello = request { #expect(decoded.request == request) } else { #expect(decoded == message) }
        }
        let event = SessionEvent(seq: 4, kind: .finished, task: "t", time: 1, path: "/p", bytes: 3, checksum: "sha256=00")
        let replies: [ServerMessage] = [
            .welcome(version: 1, session: "s", acknowledged: 2), .event(event),
            .ok(id: 3, taskIDs: ["a"], tasks: [], position: SessionPosition(lastSequence: 5, acknowledged: 2)),
            .error(id: nil, SessionError(.unsupportedVersion, "v")),
        ]
        for reply in replies { #expect(try SessionCodec.decodeServer(SessionCodec.encode(reply)) == reply) }
    }

    @Test func malformedFramesGetTypedErrors() {
        for text in ["", "[]", "{\"type\":\"fly\",\"id\":1}", "{\"type\":\"pause\",\"id\":1}", "{\"type\":\"hello\"}", "\u{FF}garbage", "{\"type\":\"ack\",\"id\":\"x\",\"upTo\":1}"] {
            #expect(throws: SessionError.self, "\(text)") { try SessionCodec.decodeClient(Array(text.utf8)) }
            do {
                _ = try SessionCodec.decodeClient(Array(text.utf8))
            } catch {
                #expect(error.code == .malformedMessage)
            }
        }
    }

    @Test func identifiersAreDirectoryNamesOnly() {
        #expect(SessionProtocol.isValidIdentifier("com.example.app-1_b"))
        for bad in ["", ".", "..", "a/b", "a b", String(repeating: "a", count: 129), "é"] {
            #expect(!SessionProtocol.isValidIdentifier(bad), "\(bad)")
        }
    }

    @Test func eventRulesLogEachTransitionOnceAcrossRestarts() {
        #expect(EventRules.kind(for: .state("t", .waiting), last: nil) == .queued)
        #expect(EventRules.kind(for: .state("t", .waiting), last: .started) == nil)
        #expect(EventRules.kind(for: .state("t", .waiting), last: .paused) == .resumed)
        #expect(EventRules.kind(for: .state("t", .running), last: .started) == nil)
        #expect(EventRules.kind(for: .state("t", .running), last: .finished) == nil)
        #expect(EventRules.kind(for: .state("t", .completed), last: .started) == nil)
        #expect(EventRules.kind(for: .removed("t"), last: .finished) == .removed)
        let now = Date()
        let task = ManagedTask(
            id: "done", originalURL: "http://h/a", currentURL: "http://h/a", fileID: nil, destination: .file("/a"),
            path: "/a", state: .completed, bytesReceived: 1, totalBytes: 1, priority: .normal, queueOrder: 0, group: nil,
            checksum: nil, headers: [:], metadata: [:], requiresUnmeteredNetwork: false, rateLimit: nil, error: nil,
            createdAt: now, updatedAt: now, finishedAt: now)
        let facts = EventRules.reconcile(tasks: [task], lastLogged: ["done": .started, "gone": .paused])
        let kinds = facts.map { fact -> String in
            switch fact {
            case .finished(let task, _): return "finished \(task.id)"
            case .removed(let id): return "removed \(id)"
            default: return "other"
            }
        }
        #expect(kinds == ["finished done", "removed gone"])
        #expect(EventRules.reconcile(tasks: [task], lastLogged: ["done": .finished]).compactMap { fact in
            EventRules.kind(for: fact, last: .finished)
        }.isEmpty)
    }
}
