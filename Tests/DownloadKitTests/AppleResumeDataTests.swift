import Foundation
import Testing
import TestThreads

@testable import DownloadKit

/// Loads the checked-in resume-data fixtures (never rewritten; see docs/RESUME-INFO.md).
enum ResumeFixtures {
    static func data(_ name: String, _ pathExtension: String = "plist") throws -> Data {
        let url = try #require(Bundle.module.url(forResource: name, withExtension: pathExtension, subdirectory: "Fixtures"))
        return try Data(contentsOf: url)
    }
}

/// Builds XML keyed archives by hand so tests can express cycles, depth and bad references.
enum HandmadeArchive {
    static func uid(_ index: Int) -> String { "<dict><key>CF$UID</key><integer>\(index)</integer></dict>" }

    static func xml(objects: [String], top: String = "root", rootIndex: Int = 1) -> Data {
        let body = """
            <?xml version="1.0" encoding="UTF-8"?>
            <plist version="1.0"><dict>
            <key>$archiver</key><string>NSKeyedArchiver</string>
            <key>$version</key><integer>100000</integer>
            <key>$top</key><dict><key>\(top)</key>\(uid(rootIndex))</dict>
            <key>$objects</key><array>\(objects.joined())</array>
            </dict></plist>
            """
        return Data(body.utf8)
    }

    static let arrayClass = "<dict><key>$classname</key><string>NSArray</string><key>$classes</key><array><string>NSArray</string><string>NSObject</string></array></dict>"
    static let dictionaryClass = "<dict><key>$classname</key><string>NSMutableDictionary</string><key>$classes</key><array><string>NSMutableDictionary</string><string>NSDictionary</string><string>NSObject</string></array></dict>"

    static func array(classIndex: Int, items: [Int]) -> String {
        "<dict><key>$class</key>\(uid(classIndex))<key>NS.objects</key><array>\(items.map(uid).joined())</array></dict>"
    }

    static func dictionary(classIndex: Int, keys: [Int], values: [Int]) -> String {
        "<dict><key>$class</key>\(uid(classIndex))<key>NS.keys</key><array>\(keys.map(uid).joined())</array>"
            + "<key>NS.objects</key><array>\(values.map(uid).joined())</array></dict>"
    }
}

@Suite(.offPool) struct AppleResumeDataTests {
    @Test func version2XMLFromSeed002DecodesEveryField() throws {
        let apple = try AppleResumeData.decode(ResumeFixtures.data("apple-v2.xml"))
        #expect(apple.infoVersion == 2)
        #expect(!apple.isKeyedArchive)
        #expect(apple.downloadURL == "https://d1opms6zj7jotq.cloudfront.net/idea/ideaIC-15.0.2-custom-jdk-bundled.dmg")
        #expect(apple.bytesReceived == 25_858_975)
        #expect(apple.entityTag == "\"054beecc2c7dbd16d58ecb9084ab4b79-19\"")
        #expect(apple.tempFileName == "CFNetworkDownload_desnj1.tmp")
        #expect(apple.localPath == nil)
        #expect(apple.serverDownloadDate == "Mon, 07 Dec 2015 21:52:40 GMT")
        #expect(apple.requestedRangeStart == 25_858_975)

        let info = try ResumeInfo.decode(ResumeFixtures.data("apple-v2.xml"))
        #expect(info.origin == .apple(version: 2))
        #expect(info.currentURL == apple.downloadURL)
        #expect(info.originalURL == apple.downloadURL)
        #expect(info.bytesReceived == 25_858_975)
        #expect(info.tempFileName == "CFNetworkDownload_desnj1.tmp")
        #expect(info.tempFilePath.hasPrefix("/"))
        #expect(info.tempFilePath.hasSuffix("/CFNetworkDownload_desnj1.tmp"))
        #expect(info.lastModified == "Mon, 07 Dec 2015 21:52:40 GMT")
    }

    @Test func binaryConversionOfVersion2DecodesLikeTheXML() throws {
        let binary = try ResumeFixtures.data("apple-v2.binary")
        #expect(binary.starts(with: Array("bplist00".utf8)))
        #expect(try AppleResumeData.decode(binary) == AppleResumeData.decode(ResumeFixtures.data("apple-v2.xml")))
    }

    @Test func version1UsesTheAbsoluteLocalPath() throws {
        let apple = try AppleResumeData.decode(ResumeFixtures.data("apple-v1.xml"))
        let path = "/private/var/mobile/Containers/Data/Application/3F2B1C4D-0000-4000-8000-00000000AB12/tmp/CFNetworkDownload_PNopRV.tmp"
        #expect(apple.infoVersion == 1)
        #expect(apple.localPath == path)
        #expect(apple.tempFileName == nil)
        #expect(apple.entityTag == "W/\"5819a9c3-7d2a10\"")
        #expect(apple.requestedRangeStart == 1_048_576)

        let info = try apple.resumeInfo(temporaryDirectory: "/var/tmp")
        #expect(info.tempFilePath == path)
        #expect(info.tempFileName == "CFNetworkDownload_PNopRV.tmp")
        #expect(info.bytesReceived == 1_048_576)
        #expect(info.origin == .apple(version: 1))
    }

    @Test func version4KeyedArchiveDecodesTheArchivedDictionary() throws {
        let data = try ResumeFixtures.data("apple-v4.keyed")
        let apple = try AppleResumeData.decode(data)
        #expect(apple.isKeyedArchive)
        #expect(apple.infoVersion == 4)
        #expect(apple.downloadURL == "http://dldir1.qq.com/qqfile/QQforMac/QQ_V4.2.4.dmg")
        #expect(apple.bytesReceived == 8_297_040)
        #expect(apple.entityTag == nil)
        #expect(apple.tempFileName == "CFNetworkDownload_sFZ0E8.tmp")
        #expect(apple.serverDownloadDate == "Thu, 12 May 2016 02:41:27 GMT")
        #expect(apple.requestedRangeStart == 8_297_040)

        let info = try ResumeInfo.decode(data)
        #expect(info.origin == .apple(version: 4))
        #expect(try apple.resumeInfo(temporaryDirectory: "/data/tmp/").tempFilePath == "/data/tmp/CFNetworkDownload_sFZ0E8.tmp")
    }

    @Test func exportWritesAVersion2XMLPlistWithTheDocumentedKeysOnly() throws {
        let info = ResumeInfo(
            originalURL: "https://example.com/a.iso",
            currentURL: "https://cdn.example.com/a.iso?sig=1",
            tempFilePath: "/var/tmp/a.iso.dkpart",
            bytesReceived: 4096,
            entityTag: "\"abc\"",
            lastModified: "Tue, 14 Nov 2023 08:00:00 GMT"
        )
        let data = try info.appleResumeData()
        #expect(data.starts(with: Array("<?xml".utf8)))
        let plist = try #require(try PropertyListSerialization.propertyList(from: data, options: [], format: nil) as? [String: Any])
        #expect(Set(plist.keys) == [
            "NSURLSessionDownloadURL", "NSURLSessionResumeBytesReceived", "NSURLSessionResumeEntityTag",
            "NSURLSessionResumeInfoTempFileName", "NSURLSessionResumeInfoLocalPath",
            "NSURLSessionResumeServerDownloadDate", "NSURLSessionResumeInfoVersion",
        ])
        let back = try AppleResumeData.decode(data)
        #expect(back == AppleResumeData(
            infoVersion: 2,
            downloadURL: "https://cdn.example.com/a.iso?sig=1",
            bytesReceived: 4096,
            entityTag: "\"abc\"",
            tempFileName: "a.iso.dkpart",
            localPath: "/var/tmp/a.iso.dkpart",
            serverDownloadDate: "Tue, 14 Nov 2023 08:00:00 GMT"
        ))
    }

    @Test(arguments: [
        ("bytes=500-", Int64(500)), ("bytes=500-999", 500), (" bytes = 7 - ", nil), ("Bytes=0-", 0),
        ("bytes=-500", nil), ("items=1-", nil), ("bytes=99999999999999999999-", nil), ("bytes=12", nil),
    ] as [(String, Int64?)])
    func rangeHeaderStartsAreParsedStrictly(header: String, expected: Int64?) {
        #expect(AppleResumeData.parseRangeStart(header) == expected)
    }

    @Test func keyedArchiveReaderResolvesStringsNumbersDataAndDates() throws {
        let stringClass = "<dict><key>$classname</key><string>NSMutableString</string><key>$classes</key><array><string>NSMutableString</string><string>NSString</string><string>NSObject</string></array></dict>"
        let dateClass = "<dict><key>$classname</key><string>NSDate</string><key>$classes</key><array><string>NSDate</string><string>NSObject</string></array></dict>"
        let objects = [
            "<string>$null</string>",
            HandmadeArchive.dictionary(classIndex: 2, keys: [3, 4, 5, 6], values: [7, 8, 10, 11]),
            HandmadeArchive.dictionaryClass,
            "<string>s</string>", "<string>n</string>", "<string>d</string>", "<string>t</string>",
            "<dict><key>$class</key>\(HandmadeArchive.uid(9))<key>NS.string</key><string>héllo</string></dict>",
            "<integer>42</integer>",
            stringClass,
            "<data>AAEC</data>",
            "<dict><key>$class</key>\(HandmadeArchive.uid(12))<key>NS.time</key><real>10.5</real></dict>",
            dateClass,
        ]
        let root = try KeyedArchiveReader.decode(HandmadeArchive.xml(objects: objects, top: "NSKeyedArchiveRootObjectKey"))
        #expect(root == .dictionary([
            "s": .string("héllo"),
            "n": .integer(42),
            "d": .data(Data([0, 1, 2])),
            "t": .date(Date(timeIntervalSinceReferenceDate: 10.5)),
        ]))
    }

    @Test func uidCyclesAreAMalformedArchiveNotACrash() {
        let objects = [
            "<string>$null</string>",
            HandmadeArchive.array(classIndex: 2, items: [3]),
            HandmadeArchive.arrayClass,
            HandmadeArchive.array(classIndex: 2, items: [1]),
        ]
        #expect { try KeyedArchiveReader.decode(HandmadeArchive.xml(objects: objects)) } throws: { error in
            (error as? ResumeInfoError)?.code == .malformedArchive
        }
    }

    @Test func deeplyNestedArchivesHitTheDepthLimit() {
        var objects = ["<string>$null</string>", HandmadeArchive.arrayClass]
        // Objects 2...201: each array holds the next; the last holds a string.
        for index in 2...201 { objects.append(HandmadeArchive.array(classIndex: 1, items: [index + 1])) }
        objects.append("<string>leaf</string>")
        let data = HandmadeArchive.xml(objects: objects, rootIndex: 2)
        #expect { try KeyedArchiveReader.decode(data) } throws: { error in
            (error as? ResumeInfoError)?.code == .tooLarge
        }
    }

    @Test func referencesOutsideObjectsAndBadClassesAreMalformed() {
        let outside = HandmadeArchive.xml(objects: ["<string>$null</string>", HandmadeArchive.array(classIndex: 2, items: [99]), HandmadeArchive.arrayClass])
        #expect { try KeyedArchiveReader.decode(outside) } throws: { ($0 as? ResumeInfoError)?.code == .malformedArchive }
        let badClass = HandmadeArchive.xml(objects: ["<string>$null</string>", HandmadeArchive.array(classIndex: 0, items: [])])
        #expect { try KeyedArchiveReader.decode(badClass) } throws: { ($0 as? ResumeInfoError)?.code == .malformedArchive }
        let noRoot = HandmadeArchive.xml(objects: ["<string>$null</string>"], top: "root", rootIndex: 5)
        #expect { try KeyedArchiveReader.decode(noRoot) } throws: { ($0 as? ResumeInfoError)?.code == .malformedArchive }
    }

    @Test func hostileAppleFieldsGiveTypedErrorsNamingTheKey() throws {
        func plist(_ change: (inout [String: Any]) -> Void) throws -> Data {
            var dictionary: [String: Any] = [
                "NSURLSessionDownloadURL": "https://example.com/f.bin",
                "NSURLSessionResumeBytesReceived": 10,
                "NSURLSessionResumeInfoTempFileName": "CFNetworkDownload_x.tmp",
                "NSURLSessionResumeInfoVersion": 2,
            ]
            change(&dictionary)
            return try PropertyListSerialization.data(fromPropertyList: dictionary, format: .xml, options: 0)
        }
        func failure(_ data: Data) -> ResumeInfoError? {
            do {
                _ = try ResumeInfo.decode(data)
                return nil
            } catch {
                return error
            }
        }
        #expect(try ResumeInfo.decode(plist { _ in }).bytesReceived == 10)

        let traversal = failure(try plist { $0["NSURLSessionResumeInfoTempFileName"] = "../../etc/passwd" })
        #expect(traversal?.code == .invalidValue)
        #expect(traversal?.key == "NSURLSessionResumeInfoTempFileName")

        let version = failure(try plist { $0["NSURLSessionResumeInfoVersion"] = 7 })
        #expect(version?.code == .unsupportedVersion)

        let negative = failure(try plist { $0["NSURLSessionResumeBytesReceived"] = -1 })
        #expect(negative?.code == .invalidValue)
        #expect(negative?.key == "NSURLSessionResumeBytesReceived")

        let noTemp = failure(try plist { $0["NSURLSessionResumeInfoTempFileName"] = nil })
        #expect(noTemp?.code == .missingKey)
        #expect(noTemp?.key == "NSURLSessionResumeInfoTempFileName")

        let relative = failure(try plist {
            $0["NSURLSessionResumeInfoVersion"] = 1
            $0["NSURLSessionResumeInfoTempFileName"] = nil
            $0["NSURLSessionResumeInfoLocalPath"] = "tmp/x"
        })
        #expect(relative?.key == "NSURLSessionResumeInfoLocalPath")

        let fileURL = failure(try plist { $0["NSURLSessionDownloadURL"] = "file:///etc/passwd" })
        #expect(fileURL?.code == .invalidValue)
        #expect(fileURL?.key == "NSURLSessionDownloadURL")

        let wrongType = failure(try plist { $0["NSURLSessionResumeBytesReceived"] = "10" })
        #expect(wrongType?.code == .invalidValue)
    }

    @Test func garbageRequestArchivesLeaveTheRangeUnknownButDecodingSucceeds() throws {
        let dictionary: [String: Any] = [
            "NSURLSessionDownloadURL": "https://example.com/f.bin",
            "NSURLSessionResumeBytesReceived": 10,
            "NSURLSessionResumeInfoTempFileName": "CFNetworkDownload_x.tmp",
            "NSURLSessionResumeInfoVersion": 2,
            "NSURLSessionResumeCurrentRequest": Data("bplist00 not really".utf8),
            "NSURLSessionResumeOriginalRequest": Data([0xFF, 0x00, 0x13]),
        ]
        let data = try PropertyListSerialization.data(fromPropertyList: dictionary, format: .binary, options: 0)
        let apple = try AppleResumeData.decode(data)
        #expect(apple.requestedRangeStart == nil)
        #expect(apple.bytesReceived == 10)
    }
}

/// Regression for a fuzzer finding (Fuzz/regressions/resumeinfo/nsset-bridging-segv.plist): Apple resume
/// data whose archived request is a binary plist holding a set made swift-corelibs-foundation's
/// PropertyListSerialization crash. It must be a typed error or a plain decode, never a crash.
@Suite(.offPool) struct HostileBinaryPlistTests {
    @Test func aSetInsideANestedBinaryPlistIsRefusedWithoutCrashing() throws {
        let url = try #require(Bundle.module.url(forResource: "hostile-nsset-in-request-archive", withExtension: "plist", subdirectory: "Fixtures"))
        let data = try Data(contentsOf: url)
        // Either the outer data decodes (the request archive is only best-effort) or a typed error.
        do {
            let info = try ResumeInfo.decode(data)
            #expect(info.origin != .downloadKit)
        } catch {
            #expect(!error.detail.isEmpty)
        }
    }

    @Test func binaryPlistsWithSetsOrBrokenTrailersAreRefused() throws {
        // A minimal bplist00 whose single object is an empty set (marker 0xC0).
        var set: [UInt8] = Array("bplist00".utf8) + [0xC0, 0x08]
        set += [0, 0, 0, 0, 0, 0, 1, 1] + [0, 0, 0, 0, 0, 0, 0, 1] + [0, 0, 0, 0, 0, 0, 0, 0] + [0, 0, 0, 0, 0, 0, 0, 9]
        #expect(throws: ResumeInfoError.self) { _ = try ResumeInfo.decode(Data(set)) }
        var truncated = set
        truncated.removeLast(40)
        #expect(throws: ResumeInfoError.self) { _ = try ResumeInfo.decode(Data(truncated)) }
        // The same list holding an empty dictionary (0xD0) passes the screen (and then fails validation
        // for missing keys, with a typed error).
        var dictionary = set
        dictionary[8] = 0xD0
        #expect(throws: ResumeInfoError.self) { _ = try ResumeInfo.decode(Data(dictionary)) }
    }

    /// Fuzzer finding (CI, stop 27): a trailer whose offset-table position is near 2⁶⁴ made the
    /// screen's bounds sum overflow and trap. Refused with a typed error instead.
    @Test func anOffsetTablePositionNearTwoToTheSixtyFourIsRefused() {
        var list: [UInt8] = Array("bplist00".utf8) + [0xD0, 0x08]
        list += [0, 0, 0, 0, 0, 0, 1, 1] + [0, 0, 0, 0, 0, 0, 0, 1] + [0, 0, 0, 0, 0, 0, 0, 0]
        list += [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFC]
        #expect(throws: ResumeInfoError.self) { _ = try ResumeInfo.decode(Data(list)) }
        #expect(throws: ResumeInfoError.self) { _ = try AppleResumeData.decode(Data(list)) }
    }
}
