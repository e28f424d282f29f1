#!/usr/bin/env python3
"""Independent float64 NumPy re-reading of tests/data/retrieval: recomputes every text's hidden state from
model.safetensors + config.json (centred conv out[t] = sum_k w[k] * Bx[t - L//2 + k] for lfm2_bidirectional, causal
out[t] = sum_k w[k] * Bx[t - (L-1) + k] for lfm2; attention over mask-1 keys, causal for lfm2), the CLS embedding /
ColBERT vectors, and the scores, and prints the max abs differences from reference.json.  No torch, no transformers.

    /usr/bin/python3 tools/retrieval_reference/crosscheck_numpy.py [tests/data/retrieval]
"""
import json, os, struct, sys
import numpy as np
ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data", "retrieval")
def load(p):
    with open(p,'rb') as f:
        n=struct.unpack('<Q',f.read(8))[0]; h=json.loads(f.read(n)); d=f.read()
    return {k:np.frombuffer(d[v['data_offsets'][0]:v['data_offsets'][1]],dtype=np.float32).reshape(v['shape']).astype(np.float64) for k,v in h.items() if k!='__metadata__'}
def rms(x,w,eps): return w*x/np.sqrt((x*x).mean(-1,keepdims=True)+eps)
def forward(W,cfg,ids,mask,causal):
    H=cfg['hidden_size']; nh=cfg['num_attention_heads']; kv=cfg['num_key_value_heads']; hd=H//nh; eps=cfg['norm_eps']; L=cfg['conv_L_cache']
    x=W['embed_tokens.weight'][ids]; T=len(ids)
    inv=1.0/(1e6**(np.arange(0,hd,2)/hd)); fr=np.outer(np.arange(T),inv); emb=np.concatenate([fr,fr],-1); cos,sin=np.cos(emb),np.sin(emb)
    def rot(q): return q*cos[:,None,:]+np.concatenate([-q[...,hd//2:],q[...,:hd//2]],-1)*sin[:,None,:]
    for i,t in enumerate(cfg['layer_types']):
        p=f'layers.{i}.'; h=rms(x,W[p+'operator_norm.weight'],eps)
        if t=='conv':
            b=lambda n: W.get(p+n, 0)
            BCx=h@W[p+'conv.in_proj.weight'].T+b('conv.in_proj.bias'); B,C,xx=BCx[:,:H],BCx[:,H:2*H],BCx[:,2*H:]; Bx=B*xx
            w=W[p+'conv.conv.weight'][:,0,:]; out=np.zeros_like(Bx)
            off = (L-1) if causal else L//2
            for tt in range(T):
                for k in range(L):
                    s=tt-off+k
                    if 0<=s<T: out[tt]+=w[:,k]*Bx[s]
            out=out+b('conv.conv.bias')
            y=(C*out)@W[p+'conv.out_proj.weight'].T+b('conv.out_proj.bias')
        else:
            q=(h@W[p+'self_attn.q_proj.weight'].T).reshape(T,nh,hd); k_=(h@W[p+'self_attn.k_proj.weight'].T).reshape(T,kv,hd); v=(h@W[p+'self_attn.v_proj.weight'].T).reshape(T,kv,hd)
            q=rot(rms(q,W[p+'self_attn.q_layernorm.weight'],eps)); k_=rot(rms(k_,W[p+'self_attn.k_layernorm.weight'],eps))
            k_=np.repeat(k_,nh//kv,axis=1); v=np.repeat(v,nh//kv,axis=1)
            s=np.einsum('qhd,khd->hqk',q,k_)/np.sqrt(hd)
            allowed=np.array(mask,bool)[None,:].repeat(T,0)
            if causal: allowed&=np.tril(np.ones((T,T),bool))
            s=np.where(allowed[None],s,-np.inf); s=s-s.max(-1,keepdims=True); a=np.exp(s); a/=a.sum(-1,keepdims=True)
            y=np.einsum('hqk,khd->qhd',a,v).reshape(T,H)@W[p+'self_attn.out_proj.weight'].T
        x=x+y
        h=rms(x,W[p+'ffn_norm.weight'],eps); g=h@W[p+'feed_forward.w1.weight'].T
        x=x+((g/(1+np.exp(-g)))*(h@W[p+'feed_forward.w3.weight'].T))@W[p+'feed_forward.w2.weight'].T
    return rms(x,W['embedding_norm.weight'],eps)
for f in ['lfm25_embedding_tiny_f32','lfm25_colbert_tiny_f32','lfm2_colbert_tiny_f32']:
    d=os.path.join(ROOT, f); W=load(d+'/model.safetensors'); cfg=json.load(open(d+'/config.json')); r=json.load(open(d+'/reference.json'))
    causal=cfg['model_type']=='lfm2'; worst=0; wv=0; vecs={}
    for t in r['texts']:
        h=forward(W,cfg,t['ids'],t['attention_mask'],causal); worst=max(worst,np.abs(h-np.array(t['hidden'])).max())
        if 'vectors' in t:
            D=load(d+'/1_Dense/model.safetensors')['linear.weight']; v=h@D.T; v/=np.linalg.norm(v,axis=1,keepdims=True); wv=max(wv,np.abs(v-np.array(t['vectors'])).max())
            vecs[t['name']]=v[np.array(t['vector_mask'],bool)]
        if 'embedding' in t:
            e=h[0]/np.linalg.norm(h[0]); wv=max(wv,np.abs(e-np.array(t['embedding'])).max()); vecs[t['name']]=e
    sc=r['scores']; ws=0
    for i,qn in enumerate(sc['queries']):
        for j,dn in enumerate(sc['documents']):
            if r['kind']=='embedding': ref=vecs[qn]@vecs[dn]
            else:
                ref=(vecs[qn]@vecs[dn].T).max(1).sum()
                n=max(len(vecs[x]) for x in sc['documents']); zp=np.vstack([vecs[dn],np.zeros((n-len(vecs[dn]),vecs[dn].shape[1]))])
                ws=max(ws,abs((vecs[qn]@zp.T).max(1).sum()-sc['rerank_zero_padded'][i][j]))
            ws=max(ws,abs(ref-sc['values'][i][j]))
    print(f,'hidden maxdiff %.2g'%worst,'vectors/embedding maxdiff %.2g'%wv,'scores maxdiff %.2g'%ws)
