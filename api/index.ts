export * from './constants.ts';
export * from './kube.ts';
export * from './report.ts';
export * from './v1alpha1.ts';
export * from './webhook-path.ts';
