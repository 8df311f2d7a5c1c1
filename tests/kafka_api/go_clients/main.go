// Command producers writes records to a Kafka endpoint with one of three Go clients nobody
// here wrote (franz-go, sarama, kafka-go), for plateau's client tests: record i has key
// "key-i", value "value-i", header n=i and timestamp 1700000000000+i ms. Each acknowledged
// record is printed as a JSON line {"key", "partition", "offset"}; any failure exits 1.
package main

import (
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/IBM/sarama"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/compress"
	kgsasl "github.com/segmentio/kafka-go/sasl"
	kgplain "github.com/segmentio/kafka-go/sasl/plain"
	kgscram "github.com/segmentio/kafka-go/sasl/scram"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	xdg "github.com/xdg-go/scram"
)

const firstTimestampMs = 1_700_000_000_000

type options struct {
	client, bootstrap, topic, compression, mechanism, user, password string
	count                                                            int
	idempotent                                                       bool
	timeout                                                          time.Duration
}

type acked struct {
	Key       string `json:"key"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

func main() {
	var o options
	flag.StringVar(&o.client, "client", "", "franz-go, sarama or kafka-go")
	flag.StringVar(&o.bootstrap, "bootstrap", "", "host:port")
	flag.StringVar(&o.topic, "topic", "", "topic to write")
	flag.IntVar(&o.count, "count", 100, "records to write")
	flag.StringVar(&o.compression, "compression", "none", "none, gzip, snappy, lz4 or zstd")
	flag.BoolVar(&o.idempotent, "idempotent", false, "idempotent producer (franz-go, sarama)")
	flag.StringVar(&o.mechanism, "sasl", "", "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
	flag.StringVar(&o.user, "user", "", "SASL user")
	flag.StringVar(&o.password, "password", "", "SASL password")
	flag.DurationVar(&o.timeout, "timeout", 60*time.Second, "give up after this long")
	flag.Parse()
	produce := map[string]func(options) ([]acked, error){
		"franz-go": franzGo, "sarama": saramaSync, "kafka-go": kafkaGo,
	}[o.client]
	if produce == nil {
		fail(fmt.Errorf("unknown client %q", o.client))
	}
	found, err := produce(o)
	if err != nil {
		fail(err)
	}
	out := json.NewEncoder(os.Stdout)
	for _, a := range found {
		if err := out.Encode(a); err != nil {
			fail(err)
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "producers:", err)
	os.Exit(1)
}

func record(i int) (key, value string, stamp time.Time) {
	return fmt.Sprintf("key-%d", i), fmt.Sprintf("value-%d", i), time.UnixMilli(firstTimestampMs + int64(i))
}

func franzGo(o options) ([]acked, error) {
	codec := map[string]kgo.CompressionCodec{
		"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression(),
		"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression(),
	}[o.compression]
	opts := []kgo.Opt{
		kgo.SeedBrokers(o.bootstrap),
		kgo.DefaultProduceTopic(o.topic),
		kgo.AllowAutoTopicCreation(),
		kgo.ProducerBatchCompression(codec),
		// Not RecordDeliveryTimeout: franz-go counts it from each record's own timestamp,
		// and these are set in the past. The context bounds the run instead.
	}
	if !o.idempotent {
		opts = append(opts, kgo.DisableIdempotentWrite())
	}
	if o.mechanism != "" {
		mechanism := map[string]sasl.Mechanism{
			"PLAIN":         plain.Auth{User: o.user, Pass: o.password}.AsMechanism(),
			"SCRAM-SHA-256": scram.Auth{User: o.user, Pass: o.password}.AsSha256Mechanism(),
			"SCRAM-SHA-512": scram.Auth{User: o.user, Pass: o.password}.AsSha512Mechanism(),
		}[o.mechanism]
		opts = append(opts, kgo.SASL(mechanism))
	}
	client, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	var mu sync.Mutex
	var found []acked
	var firstErr error
	for i := 0; i < o.count; i++ {
		key, value, stamp := record(i)
		r := &kgo.Record{
			Key: []byte(key), Value: []byte(value), Timestamp: stamp,
			Headers: []kgo.RecordHeader{{Key: "n", Value: []byte(fmt.Sprint(i))}},
		}
		client.Produce(ctx, r, func(r *kgo.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			found = append(found, acked{string(r.Key), r.Partition, r.Offset})
		})
	}
	if err := client.Flush(ctx); err != nil {
		return nil, err
	}
	return found, firstErr
}

// xdgSCRAM is sarama's SCRAM client, as sarama's own example builds it.
type xdgSCRAM struct {
	hash xdg.HashGeneratorFcn
	conv *xdg.ClientConversation
}

func (x *xdgSCRAM) Begin(user, password, authz string) error {
	client, err := x.hash.NewClient(user, password, authz)
	if err != nil {
		return err
	}
	x.conv = client.NewConversation()
	return nil
}

func (x *xdgSCRAM) Step(challenge string) (string, error) { return x.conv.Step(challenge) }
func (x *xdgSCRAM) Done() bool                            { return x.conv.Done() }

func saramaSync(o options) ([]acked, error) {
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V2_8_0_0
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	cfg.Producer.Timeout = o.timeout
	cfg.Producer.Compression = map[string]sarama.CompressionCodec{
		"none": sarama.CompressionNone, "gzip": sarama.CompressionGZIP,
		"snappy": sarama.CompressionSnappy, "lz4": sarama.CompressionLZ4,
		"zstd": sarama.CompressionZSTD,
	}[o.compression]
	if o.idempotent {
		cfg.Producer.Idempotent = true
		cfg.Net.MaxOpenRequests = 1 // sarama's condition for idempotence
	}
	if o.mechanism != "" {
		cfg.Net.SASL.Enable = true
		cfg.Net.SASL.User = o.user
		cfg.Net.SASL.Password = o.password
		cfg.Net.SASL.Mechanism = sarama.SASLMechanism(o.mechanism)
		hashes := map[string]xdg.HashGeneratorFcn{
			"SCRAM-SHA-256": xdg.HashGeneratorFcn(sha256.New),
			"SCRAM-SHA-512": xdg.HashGeneratorFcn(sha512.New),
		}
		if hash, ok := hashes[o.mechanism]; ok {
			cfg.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient {
				return &xdgSCRAM{hash: hash}
			}
		}
	}
	producer, err := sarama.NewSyncProducer([]string{o.bootstrap}, cfg)
	if err != nil {
		return nil, err
	}
	defer producer.Close()
	messages := make([]*sarama.ProducerMessage, o.count)
	for i := range messages {
		key, value, stamp := record(i)
		messages[i] = &sarama.ProducerMessage{
			Topic: o.topic, Key: sarama.StringEncoder(key), Value: sarama.StringEncoder(value),
			Timestamp: stamp,
			Headers:   []sarama.RecordHeader{{Key: []byte("n"), Value: []byte(fmt.Sprint(i))}},
		}
	}
	if err := producer.SendMessages(messages); err != nil {
		return nil, err
	}
	found := make([]acked, len(messages))
	for i, m := range messages {
		key, _, _ := record(i)
		found[i] = acked{key, m.Partition, m.Offset}
	}
	return found, nil
}

func kafkaGo(o options) ([]acked, error) {
	var mechanism kgsasl.Mechanism
	var err error
	switch o.mechanism {
	case "":
	case "PLAIN":
		mechanism = kgplain.Mechanism{Username: o.user, Password: o.password}
	case "SCRAM-SHA-256":
		mechanism, err = kgscram.Mechanism(kgscram.SHA256, o.user, o.password)
	case "SCRAM-SHA-512":
		mechanism, err = kgscram.Mechanism(kgscram.SHA512, o.user, o.password)
	default:
		err = fmt.Errorf("unknown SASL mechanism %q", o.mechanism)
	}
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	var found []acked
	writer := &kafkago.Writer{
		Addr:                   kafkago.TCP(o.bootstrap),
		Topic:                  o.topic,
		RequiredAcks:           kafkago.RequireAll,
		AllowAutoTopicCreation: true,
		BatchTimeout:           10 * time.Millisecond,
		Compression: map[string]compress.Compression{
			"none": 0, "gzip": compress.Gzip, "snappy": compress.Snappy,
			"lz4": compress.Lz4, "zstd": compress.Zstd,
		}[o.compression],
		Transport: &kafkago.Transport{SASL: mechanism},
		Completion: func(messages []kafkago.Message, err error) {
			if err != nil {
				return // WriteMessages returns it
			}
			mu.Lock()
			defer mu.Unlock()
			for _, m := range messages {
				found = append(found, acked{string(m.Key), int32(m.Partition), m.Offset})
			}
		},
	}
	messages := make([]kafkago.Message, o.count)
	for i := range messages {
		key, value, stamp := record(i)
		messages[i] = kafkago.Message{
			Key: []byte(key), Value: []byte(value), Time: stamp,
			Headers: []kafkago.Header{{Key: "n", Value: []byte(fmt.Sprint(i))}},
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	err = writer.WriteMessages(ctx, messages...)
	if closeErr := writer.Close(); err == nil {
		err = closeErr
	}
	return found, err
}
