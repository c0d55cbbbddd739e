import Foundation
import Glibc
import Testing
import TestOrigin
import TestThreads

@testable import HTTPClient

/// The receive low-water rule (`SO_RCVLOWAT` while a fast body owes plenty) as a value, then on real
/// sockets: a batch is waited for, but bytes a slow sender already sent are never held back.
@Suite(.offPool) struct ReceiveLowWaterTests {
    static let mark = ReceiveLowWater.fastMark
    static let patience = ReceiveLowWater.patienceNanoseconds

    @Test func theMarkIsUsedOnlyWhileTheBodyOwesTwoMarksAndTheBufferTakesOne() {
        let rule = ReceiveLowWater()
        #expect(rule.mark(remaining: 64 << 20, bufferCapacity: 1 << 20) == Self.mark)
        #expect(rule.mark(remaining: Int64(2 * Self.mark), bufferCapacity: 1 << 20) == Self.mark)
        #expect(rule.mark(remaining: Int64(2 * Self.mark) - 1, bufferCapacity: 1 << 20) == 1, "the last stretch is read as it comes")
        #expect(rule.mark(remaining: nil, bufferCapacity: 1 << 20) == 1, "unknown length: chunked, close-delimited, a head")
        #expect(rule.mark(remaining: 64 << 20, bufferCapacity: Self.mark - 1) == 1, "a buffer smaller than the mark")
    }

    @Test func aPatientWaitThatRunsOutDropsTheMarkUntilReadsShowTheRateAgain() {
        var rule = ReceiveLowWater()
        rule.markedWaitTimedOut(now: 1_000)
        #expect(!rule.isEnabled)
        #expect(rule.mark(remaining: 64 << 20, bufferCapacity: 1 << 20) == 1)
        // A capped stream: 256 KiB every 10 ms is half a mark per patience: stays without a mark.
        var now: UInt64 = 1_000
        for _ in 0..<20 {
            now += 2 * Self.patience
            rule.read(Self.mark, now: now)
            #expect(!rule.isEnabled)
        }
        // Bytes piling up: two marks within one patience, over a full window of four.
        for _ in 0..<4 {
            now += Self.patience
            rule.read(2 * Self.mark, now: now)
        }
        #expect(rule.isEnabled)
        #expect(rule.mark(remaining: 64 << 20, bufferCapacity: 1 << 20) == Self.mark)
    }

    @Test func aWindowShorterThanFourPatiencesDecidesNothing() {
        var rule = ReceiveLowWater()
        rule.markedWaitTimedOut(now: 0)
        rule.read(64 << 20, now: 3 * Self.patience)
        #expect(!rule.isEnabled, "one burst right after a slow stretch is not a rate")
        rule.read(0, now: 4 * Self.patience)
        #expect(rule.isEnabled)
    }

    @Test func whileTheMarkIsOnReadsAskNoClock() {
        var rule = ReceiveLowWater()
        var asked = false
        rule.read(1, now: {
            asked = true
            return 0
        }())
        #expect(!asked)
        #expect(rule.isEnabled)
    }

    /// A plain connection to a loopback listener and the listener's end of it (the caller closes it).
    static func connectedPair() throws -> (Connection, Int32) {
        let listener = try #require(LoopbackListener())
        let connection = try Connection.connect(
            host: "127.0.0.1", port: listener.port, tls: nil, serverName: nil, deadline: .after(seconds: 5))
        return (connection, try listener.accept())
    }

    /// A body that owes 64 MiB, of which the sender has sent 1,000 bytes and then nothing: the read
    /// returns those bytes (after the patience), not a timeout at the deadline with the bytes still in
    /// the kernel.
    @Test func aMarkedReadReturnsWhatASlowSenderSent() throws {
        let (connection, server) = try Self.connectedPair()
        defer { close(server) }
        let sender = Thread {
            Thread.sleep(forTimeInterval: 0.05)
            sendAll(server, String(repeating: "x", count: 1_000))
        }
        sender.start()
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }
        let count = try connection.read(into: buffer, deadline: .after(seconds: 20), remaining: 64 << 20)
        #expect(count == 1_000)
    }

    /// After a batch read under the mark, the end of the message puts the socket back to waking for any
    /// byte: a stray byte on the idle kept-alive connection is seen by the pool's stale check.
    @Test func theEndOfAMessageLetsTheStaleCheckSeeAStrayByte() throws {
        let (connection, server) = try Self.connectedPair()
        defer { close(server) }
        let sender = Thread {
            Thread.sleep(forTimeInterval: 0.02)
            sendAll(server, String(repeating: "y", count: Self.mark))
        }
        sender.start()
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }
        var received = 0
        while received < Self.mark {
            received += try connection.read(
                into: buffer, deadline: .after(seconds: 20), remaining: Int64(64 << 20) - Int64(received))
        }
        #expect(received == Self.mark)
        connection.endOfMessage()
        sendAll(server, "z")
        #expect(try connection.waitForReadable(deadline: .after(seconds: 20)))
        #expect(connection.hasPendingInputOrEOF)
    }
}
